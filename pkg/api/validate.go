package api

// shaped reports whether s is not empty, its first byte passes first and every other byte
// rest: the shape of names, ids and references. It stands where a regular expression would,
// whose compilation at package initialisation every start of the CLI would pay.
func shaped(s string, first, rest func(byte) bool) bool {
	if s == "" || !first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !rest(s[i]) {
			return false
		}
	}
	return true
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool { return isLower(c) || isDigit(c) || ('A' <= c && c <= 'Z') }
