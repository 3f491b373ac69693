// Package core names the virt-template API group and its one resource (see ../go.mod: a
// stand-in that compiles KubeVirt v1.9.0's virt-controller).
package core

// The API group of VirtualMachineTemplates and the resource's names in it.
const (
	GroupName            = "template.kubevirt.io"
	SingularResourceName = "virtualmachinetemplate"
	PluralResourceName   = SingularResourceName + "s"
)
