// Stand-in for kubevirt.io/virt-template-client-go v0.2.0, which the Go module proxy does not
// serve. KubeVirt v1.9.0's virt-controller builds a REST client from it for the
// VirtualMachineTemplate informer (started only with the Alpha OCIExport gate on): this module
// gives that client, for the group and version of kubevirt.io/virt-template-api/core/v1beta1.
module kubevirt.io/virt-template-client-go

go 1.26.0

require (
	k8s.io/apimachinery v0.34.2
	k8s.io/client-go v0.34.2
	kubevirt.io/virt-template-api v0.2.0
)
