//go:build tools

// Package kwok pins the KWOK node agent the integration tests run.
// It is never compiled; `go build` of the listed main package uses this module's go.mod.
package kwok

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
