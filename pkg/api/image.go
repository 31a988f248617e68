package api

import "time"

// Image is a built root filesystem image sandboxes start from.
type Image struct {
	// Name is the image's name, e.g. "base".
	Name string `json:"name"`
	// Digest identifies the definition it was built from, e.g. "sha256:3f1c…".
	Digest string `json:"digest"`
	// SizeBytes is the size of the root filesystem on disk.
	SizeBytes int64 `json:"size_bytes"`
	// BuiltAt is when the image was built.
	BuiltAt time.Time `json:"built_at"`
	// Harnesses are the coding-agent harnesses the image carries, in the order a session without
	// a harness named prefers them; none for an image without harnesses.
	Harnesses []ImageHarness `json:"harnesses,omitempty"`
}

// ImageHarness is a harness an image carries.
type ImageHarness struct {
	// Name is the harness's name, e.g. "claude-code".
	Name string `json:"name"`
	// Version is the version of its package the image was built with, e.g. "0.101.0".
	Version string `json:"version"`
}

// ImageList is the body of GET /v1/images.
type ImageList struct {
	Images []Image `json:"images"`
	// Definitions names every image the daemon knows how to build.
	Definitions []string `json:"definitions"`
}

// ImageBuildPost is the body of POST /v1/images/{name}/build.
type ImageBuildPost struct {
	// Force rebuilds even when the built image matches its definition.
	Force bool `json:"force,omitempty"`
}

// ImageBuildEvent is one line of the newline-delimited JSON stream POST /v1/images/{name}/build
// answers with: progress lines, then exactly one Image or Error.
type ImageBuildEvent struct {
	Progress string `json:"progress,omitempty"`
	Image    *Image `json:"image,omitempty"`
	Error    *Error `json:"error,omitempty"`
}

// VersionInfo is the body of GET /v1/version.
type VersionInfo struct {
	// Version is the daemon's build version.
	Version string `json:"version"`
	// API is the API version, "v1".
	API string `json:"api"`
	// VolumeDriver is the workspace volume driver in use, e.g. "xfs".
	VolumeDriver string `json:"volume_driver"`
	// Capabilities lists optional features this daemon serves, e.g. "workspace_grow".
	Capabilities []string `json:"capabilities"`
}
