package main

// versionGenerators is empty: KubeVirt v1.7.0 installs only the CRDs of every supported version
// (the shared crdgen/generators.go, copied beside this file at build time).
var versionGenerators []generator
