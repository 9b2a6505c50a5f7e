//go:build tools

// Package trainingoperator pins the Kubeflow training operator the integration tests run.
// It is never compiled; `go build` of the listed main package uses this module's go.mod.
package trainingoperator

import (
	_ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
)
