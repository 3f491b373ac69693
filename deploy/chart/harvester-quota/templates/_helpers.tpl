{{/* Names and labels shared by every template. */}}
{{- define "hq.name" -}}harvester-quota{{- end -}}
{{- define "hq.webhookName" -}}harvester-quota-webhook{{- end -}}
{{- define "hq.image" -}}{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}
{{- define "hq.controllerUser" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "hq.name" . }}{{- end -}}
{{- define "hq.webhookUser" -}}system:serviceaccount:{{ .Release.Namespace }}:{{ include "hq.webhookName" . }}{{- end -}}
{{- define "hq.kubevirtUser" -}}system:serviceaccount:{{ .Values.kubevirt.namespace }}:{{ .Values.kubevirt.controllerServiceAccount }}{{- end -}}
{{- define "hq.kubevirtHandlerUser" -}}system:serviceaccount:{{ .Values.kubevirt.namespace }}:{{ .Values.kubevirt.handlerServiceAccount }}{{- end -}}
{{- define "hq.kubevirtApiUser" -}}system:serviceaccount:{{ .Values.kubevirt.namespace }}:{{ .Values.kubevirt.apiServiceAccount }}{{- end -}}
{{- define "hq.selector" -}}app.kubernetes.io/name: harvester-quota, app.kubernetes.io/component: {{ . }}{{- end -}}
{{- define "hq.clientConfig" -}}
service: {name: {{ include "hq.webhookName" .root }}, namespace: {{ .root.Release.Namespace }}, path: /validate/{{ .path }}, port: 443}
{{- if not .root.Values.certificates.certManager.enabled }}
caBundle: {{ .root.Values.certificates.caBundle }}
{{- end }}
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
