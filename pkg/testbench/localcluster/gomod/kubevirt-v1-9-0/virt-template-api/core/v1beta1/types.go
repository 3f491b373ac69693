// Package v1beta1 is the part of the VirtualMachineTemplate v1beta1 API that KubeVirt v1.9.0's
// virt-controller compiles against (see ../../go.mod: a stand-in, not the published module).
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kubevirt.io/virt-template-api/core"
)

// GroupVersion is the group and version the objects of this package are served under.
var GroupVersion = schema.GroupVersion{Group: core.GroupName, Version: "v1beta1"}

// ConditionReady is the condition type a template reports once it can be processed.
const ConditionReady = "Ready"

// Parameter is one value substituted for ${Name} when a template is processed.
type Parameter struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// VirtualMachineTemplateSpec holds the templated VirtualMachine and its parameters.
type VirtualMachineTemplateSpec struct {
	VirtualMachine *runtime.RawExtension `json:"virtualMachine"`
	Parameters     []Parameter           `json:"parameters,omitempty"`
}

// VirtualMachineTemplateStatus carries the template's conditions.
type VirtualMachineTemplateStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VirtualMachineTemplate is a namespaced template of a VirtualMachine.
type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualMachineTemplateSpec   `json:"spec"`
	Status VirtualMachineTemplateStatus `json:"status,omitempty"`
}

// DeepCopy returns a copy sharing no memory with the receiver.
func (in *VirtualMachineTemplate) DeepCopy() *VirtualMachineTemplate {
	if in == nil {
		return nil
	}
	out := &VirtualMachineTemplate{TypeMeta: in.TypeMeta}
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.VirtualMachine != nil {
		out.Spec.VirtualMachine = in.Spec.VirtualMachine.DeepCopy()
	}
	out.Spec.Parameters = append([]Parameter(nil), in.Spec.Parameters...)
	for i := range in.Status.Conditions {
		condition := metav1.Condition{}
		in.Status.Conditions[i].DeepCopyInto(&condition)
		out.Status.Conditions = append(out.Status.Conditions, condition)
	}
	return out
}

// DeepCopyObject makes VirtualMachineTemplate a runtime.Object (informers store it).
func (in *VirtualMachineTemplate) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}
