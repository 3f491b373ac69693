package main

import (
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

// generator builds one CRD from the kubevirt.io/kubevirt version the module requires.
type generator = func() (*extv1.CustomResourceDefinition, error)

// generators are the CRDs of the module's KubeVirt version: the ones virt-operator's install
// strategy creates, plus the KubeVirt CRD itself, which its own deployment manifest installs.
// The list below is what every supported version installs; versionGenerators (the module's own
// crdgen/version.go) adds the ones its version brought.
var generators = append([]generator{
	components.NewKubeVirtCrd,
	components.NewVirtualMachineInstanceCrd,
	components.NewPresetCrd,
	components.NewReplicaSetCrd,
	components.NewVirtualMachineCrd,
	components.NewVirtualMachineInstanceMigrationCrd,
	components.NewVirtualMachineSnapshotCrd,
	components.NewVirtualMachineSnapshotContentCrd,
	components.NewVirtualMachineRestoreCrd,
	components.NewVirtualMachineInstancetypeCrd,
	components.NewVirtualMachineClusterInstancetypeCrd,
	components.NewVirtualMachinePoolCrd,
	components.NewMigrationPolicyCrd,
	components.NewVirtualMachinePreferenceCrd,
	components.NewVirtualMachineClusterPreferenceCrd,
	components.NewVirtualMachineExportCrd,
	components.NewVirtualMachineCloneCrd,
}, versionGenerators...)
