package manager

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// How terraform steps get opr8r-step (--step-binary).
const (
	// StepBinaryAuto mounts the step image where the API server is
	// Kubernetes 1.36 or later (image volumes GA, their gate locked on),
	// and installs it elsewhere.
	StepBinaryAuto = "auto"
	// StepBinaryImageVolume mounts the step image into each pod as a
	// read-only image volume: no container copies the binary.
	StepBinaryImageVolume = "image-volume"
	// StepBinaryInitContainer copies the binary from the step image into
	// an emptyDir, in a container before the steps of each pod.
	StepBinaryInitContainer = "init-container"
)

// imageVolumesGA is the first Kubernetes version whose image volumes are
// GA and cannot be turned off (1.35 has them on by default, as a beta an
// admin may have disabled).
var imageVolumesGA = version.MustParseGeneric("1.36.0")

// StepBinaryFromImage decides --step-binary: whether terraform steps run
// opr8r-step from the step image mounted as an image volume. gitVersion is
// the API server's (asked only for auto).
func StepBinaryFromImage(mode string, gitVersion func() (string, error)) (bool, string, error) {
	switch mode {
	case StepBinaryImageVolume:
		return true, "set by --step-binary", nil
	case StepBinaryInitContainer:
		return false, "set by --step-binary", nil
	case StepBinaryAuto, "":
	default:
		return false, "", fmt.Errorf("--step-binary=%q: want %s, %s or %s", mode, StepBinaryAuto, StepBinaryImageVolume, StepBinaryInitContainer)
	}
	gv, err := gitVersion()
	if err != nil {
		return false, "", fmt.Errorf("--step-binary=auto: reading the API server's version: %w (set --step-binary=%s or %s)", err, StepBinaryImageVolume, StepBinaryInitContainer)
	}
	v, err := version.ParseGeneric(gv)
	if err != nil {
		// The copy works on any version: a server whose version does not
		// parse gets it, and the log says why.
		return false, fmt.Sprintf("the API server's version %q does not parse (%v): set --step-binary=%s if it serves image volumes", gv, err, StepBinaryImageVolume), nil
	}
	if v.AtLeast(imageVolumesGA) {
		return true, "the API server is " + gv + ": image volumes are GA", nil
	}
	return false, "the API server is " + gv + ": image volumes are GA from 1.36", nil
}

// ServerGitVersion asks the API server for its version.
func ServerGitVersion(cfg *rest.Config) func() (string, error) {
	return func() (string, error) {
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return "", err
		}
		info, err := dc.ServerVersion()
		if err != nil {
			return "", err
		}
		return info.GitVersion, nil
	}
}
