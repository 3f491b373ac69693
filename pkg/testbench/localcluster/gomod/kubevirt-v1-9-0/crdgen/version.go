package main

import "kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"

// versionGenerators are the CRDs KubeVirt v1.9.0 installs beyond those of every supported version
// (the shared crdgen/generators.go, copied beside this file at build time).
var versionGenerators = []generator{
	components.NewVirtualMachineBackupCrd,
	components.NewVirtualMachineBackupTrackerCrd,
	components.NewPluginCrd,
}
