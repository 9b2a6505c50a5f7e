//go:build tools

// Package k8s pins the control-plane binaries the integration tests run, and kubectl.
// It is never compiled; `go build` of the listed main packages uses this module's go.mod.
package k8s

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
