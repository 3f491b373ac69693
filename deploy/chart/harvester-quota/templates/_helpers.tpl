{{/* Names and labels shared by every template. */}}
{{- define "hq.name" -}}harvester-quota{{- end -}}
{{- define "hq.webhookName" -}}harvester-quota-webhook{{- end -}}
{{- define "hq.image" -}}{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}
{{- define "hq.controllerUser" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "hq.name" . }}{{- end -}}
{{- define "hq.webhookUser" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "hq.webhookName" . }}{{- end -}}
{{- define "hq.kubevirtUser" -}}system:serviceaccount:{{ include "hq.kubevirtNamespace" . }}:{{ .Values.kubevirt.controllerServiceAccount }}{{- end -}}
{{- define "hq.kubevirtHandlerUser" -}}system:serviceaccount:{{ include "hq.kubevirtNamespace" . }}:{{ .Values.kubevirt.handlerServiceAccount }}{{- end -}}
{{- define "hq.kubevirtApiUser" -}}system:serviceaccount:{{ include "hq.kubevirtNamespace" . }}:{{ .Values.kubevirt.apiServiceAccount }}{{- end -}}
{{/*
KubeVirt's namespace, the one the webhook's rules and the kubevirt-labels and kubevirt-status
policies name KubeVirt's accounts in (a wrong one refuses every launcher pod and every
virt-handler status write). Found in the cluster: the namespaces of the KubeVirt CRs
(kubevirts.kubevirt.io, any namespace), else those of the ServiceAccounts
kubevirt.controllerServiceAccount in kubevirt and harvester-system. Then:
  - found, kubevirt.namespace empty: the one found (several: fail, set it);
  - found, kubevirt.namespace set: it must be one of them, else fail before anything changes;
  - nothing found (helm template, --dry-run=client, or KubeVirt not installed yet): the value,
    which must then be set, else fail saying what to set.
*/}}
{{- define "hq.kubevirtNamespace" -}}
{{- $given := .Values.kubevirt.namespace -}}
{{- $found := include "hq.kubevirtNamespacesFound" . | fromJsonArray -}}
{{- if and $found $given -}}
  {{- if not (has $given $found) -}}
    {{- fail (printf "kubevirt.namespace=%s, but KubeVirt runs in %s in this cluster: its policies would refuse KubeVirt's own accounts; leave kubevirt.namespace empty (found in the cluster) or set it to %s" $given (join ", " $found) (first $found)) -}}
  {{- end -}}
  {{- $given -}}
{{- else if $found -}}
  {{- if gt (len $found) 1 -}}
    {{- fail (printf "KubeVirt runs in several namespaces (%s): set kubevirt.namespace to the one whose virt-controller manages the VMs" (join ", " $found)) -}}
  {{- end -}}
  {{- first $found -}}
{{- else if $given -}}
  {{- $given -}}
{{- else -}}
  {{- fail "cannot find KubeVirt's namespace: no KubeVirt CR (kubevirts.kubevirt.io) in the cluster and no ServiceAccount kubevirt-controller in kubevirt or harvester-system (helm template and --dry-run=client look in no cluster); set kubevirt.namespace: kubevirt upstream, harvester-system on Harvester" -}}
{{- end -}}
{{- end -}}
{{/* The namespaces KubeVirt runs in as the cluster shows them, a JSON list (empty with no cluster). */}}
{{- define "hq.kubevirtNamespacesFound" -}}
{{- $found := list -}}
{{- range (lookup "kubevirt.io/v1" "KubeVirt" "" "").items -}}
  {{- $found = append $found .metadata.namespace -}}
{{- end -}}
{{- if not $found -}}
  {{- range (list "kubevirt" "harvester-system") -}}
    {{- if lookup "v1" "ServiceAccount" . $.Values.kubevirt.controllerServiceAccount -}}
      {{- $found = append $found . -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- $found | uniq | sortAlpha | toJson -}}
{{- end -}}
{{/* Whether the controller adopts quotas from Harvester's own controllers (run
--adopt-harvester-quotas): controller.adoptHarvesterQuotas "true" or "false", or "auto" (the
default): on Harvester's layout, KubeVirt in harvester-system, where Harvester's migration and
resourcequota controllers always run beside us. Unset (a `helm upgrade --reuse-values` from a
release without the value) is auto. */}}
{{- define "hq.adoptHarvesterQuotas" -}}
{{- $given := .Values.controller.adoptHarvesterQuotas -}}
{{- $value := ternary "auto" (toString $given) (kindIs "invalid" $given) -}}
{{- if eq $value "auto" -}}
  {{- eq (include "hq.kubevirtNamespace" .) "harvester-system" -}}
{{- else if has $value (list "true" "false") -}}
  {{- $value -}}
{{- else -}}
  {{- fail (printf "controller.adoptHarvesterQuotas=%s: auto, true or false" $value) -}}
{{- end -}}
{{- end -}}
{{- define "hq.selector" -}}app.kubernetes.io/name: harvester-quota, app.kubernetes.io/component: {{ . }}{{- end -}}
{{- define "hq.clientConfig" -}}
service: {name: {{ include "hq.webhookName" .root }}, namespace: {{ .root.Release.Namespace }}, path: /validate/{{ .path }}, port: 443}
{{- if eq (include "hq.certificateSource" .root) "secret" }}
caBundle: {{ .root.Values.certificates.caBundle }}
{{- end }}
{{- end -}}
{{/* Where the serving certificate comes from (values.yaml, certificates): self (the default:
the webhook's own CA, caBundle kept by the webhook), cert-manager, or secret (given, with its
caBundle). cert-manager with a caBundle is refused: two sources for one caBundle. */}}
{{- define "hq.certificateSource" -}}
{{- $certificates := .Values.certificates -}}
{{- $bundle := ternary "" (toString $certificates.caBundle) (or (kindIs "invalid" $certificates.caBundle) (eq (toString $certificates.caBundle) "Cg==")) -}}
{{- if and $certificates.certManager.enabled $bundle -}}
  {{- fail "certificates.certManager.enabled and certificates.caBundle are both set: cert-manager's CA injector fills caBundle; unset caBundle (or disable certManager to use your own Secret)" -}}
{{- else if $certificates.certManager.enabled -}}
cert-manager
{{- else if $bundle -}}
secret
{{- else -}}
self
{{- end -}}
{{- end -}}
{{- /* quota.featureGates as the --quota-feature-gates arg (nothing when empty). The known gates
       are the command's (harvester_quota.util.podusage.QUOTA_FEATURE_GATES, each rendered by
       tests/integration/test_chart.py): another is refused here rather than by each pod at its
       start. dig: an upgrade reusing an older chart's values has no quota. */ -}}
{{- define "hq.quotaFeatureGates" -}}
{{- $known := list "PodLevelResourcesEphemeralStorage" -}}
{{- $pairs := list -}}
{{- range $gate, $on := (dig "quota" "featureGates" (dict) .Values.AsMap) -}}
{{- if not (has $gate $known) -}}
{{- fail (printf "quota.featureGates.%s: unknown gate (known: %s)" $gate (join ", " $known)) -}}
{{- end -}}
{{- if not (kindIs "bool" $on) -}}
{{- fail (printf "quota.featureGates.%s=%v: true or false" $gate $on) -}}
{{- end -}}
{{- $pairs = append $pairs (printf "%s=%t" $gate $on) -}}
{{- end -}}
{{- if $pairs }}- --quota-feature-gates={{ join "," $pairs }}{{ end -}}
{{- end -}}
{{- /* The logging flags of both processes, checked here: a value the command refuses would
       only show as a crash loop. */ -}}
{{- define "hq.logArgs" -}}
{{- if not (has .Values.logging.format (list "text" "json")) -}}
{{- fail (printf "logging.format must be text or json, not %v" .Values.logging.format) -}}
{{- end -}}
{{- if not (regexMatch "^[0-9]+$" (toString .Values.logging.verbosity)) -}}
{{- fail (printf "logging.verbosity must be a whole number from 0, not %v" .Values.logging.verbosity) -}}
{{- end -}}
- --log-format={{ .Values.logging.format }}
- --verbose={{ .Values.logging.verbosity }}
{{- end -}}
{{/*
The namespaceSelector of the pods that may scrape /metrics: a component's
networkPolicy.metricsNamespaceSelector when set, else the namespace monitoring.namespace, by the
label the API server sets to a namespace's own name (no tenant can put it on another namespace).
Called with (list <selector> <root context>).
*/}}
{{- define "hq.scrapersSelector" -}}
{{- $selector := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $selector -}}
{{- toYaml $selector -}}
{{- else -}}
{{- $namespace := (($root.Values.monitoring | default dict).namespace) | default "cattle-monitoring-system" -}}
matchLabels: {kubernetes.io/metadata.name: {{ $namespace | quote }}}
{{- end -}}
{{- end -}}
{{/* The scrape jobs the alerts select: the values, else the PodMonitors' (<namespace>/<name>). */}}
{{- define "hq.controllerJob" -}}
{{- .Values.monitoring.prometheusRule.controllerJob | default (printf "%s/%s-controller" .Release.Namespace (include "hq.name" .)) -}}
{{- end -}}
{{- define "hq.webhookJob" -}}
{{- .Values.monitoring.prometheusRule.webhookJob | default (printf "%s/%s" .Release.Namespace (include "hq.webhookName" .)) -}}
{{- end -}}

{{/*
The webhook's own CA (certificates.selfSigned), each value defaulted here too: a `helm upgrade
--reuse-values` from a chart before the self-managed certificates brings no selfSigned key.
*/}}
{{- define "hq.selfSigned" -}}
{{- $given := (.Values.certificates | default dict).selfSigned | default dict -}}
{{- $defaults := dict "secretName" "harvester-quota-webhook-ca" "caLifetime" "7d" "certLifetime" "24h" -}}
{{- toJson (merge (deepCopy $given) $defaults) -}}
{{- end -}}
