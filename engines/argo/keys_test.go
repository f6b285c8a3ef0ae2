package argo

import (
	"testing"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v3/workflow/common"
)

func TestKeysAreArgos(t *testing.T) {
	for mine, argos := range map[string]string{
		LabelWorkflow:    common.LabelKeyWorkflow,
		AnnotationNodeID: common.AnnotationKeyNodeID,
		GroupPrefix:      wfv1.SchemeGroupVersion.Group + "/",
	} {
		if mine != argos {
			t.Errorf("%q is %q in Argo: the policies read Argo's", mine, argos)
		}
	}
}
