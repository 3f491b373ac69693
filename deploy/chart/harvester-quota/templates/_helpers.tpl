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
