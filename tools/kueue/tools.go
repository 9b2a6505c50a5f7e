//go:build tools

// Package kueue pins the Kueue controller the integration tests queue jobs with.
// It is never compiled; `go build` of the listed main package uses this module's go.mod.
package kueue

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
