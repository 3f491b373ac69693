// Stand-in for kubevirt.io/virt-template-api v0.2.0, which the Go module proxy does not serve
// (403 for every version). KubeVirt v1.9.0's virt-controller imports it only for its
// VirtualMachineTemplate export source, whose informer starts only when the Alpha OCIExport gate
// is on (never in the local cluster). This module declares what that code compiles against and
// nothing more: the names, the group and the JSON shape of the object.
module kubevirt.io/virt-template-api

go 1.26.0

require k8s.io/apimachinery v0.34.2
