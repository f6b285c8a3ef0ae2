package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// deletionPredicate passes updates that start a deletion.
type deletionPredicate struct{ predicate.Funcs }

// Update implements predicate.Predicate.
func (deletionPredicate) Update(e event.UpdateEvent) bool {
	return e.ObjectNew.GetDeletionTimestamp() != nil
}
