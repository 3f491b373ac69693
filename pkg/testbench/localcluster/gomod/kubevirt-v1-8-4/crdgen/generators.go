package main

import (
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

// generators are the CRDs of KubeVirt v1.8.4: the ones virt-operator's install strategy creates,
// plus the KubeVirt CRD itself, which its own deployment manifest installs.
var generators = []func() (*extv1.CustomResourceDefinition, error){
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
	components.NewVirtualMachineBackupCrd,
	components.NewVirtualMachineBackupTrackerCrd,
}
