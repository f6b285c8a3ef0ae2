// Package crd embeds the generated CustomResourceDefinitions so that the
// manager (--install-crds), the kubectl plugin and tests install exactly what
// controller-gen produced.
package crd

import "embed"

// Bases holds config/crd/bases/*.yaml.
//
//go:embed bases/*.yaml
var Bases embed.FS
