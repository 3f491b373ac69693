// Wrapper module: pins prometheus-operator, whose CRDs (PodMonitor, PrometheusRule) the chart's
// monitoring objects are checked against in the test suite; nothing is built from it.
module harvester-quota.invalid/cluster/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
