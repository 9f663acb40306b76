{{- define "cozyplane.labels" -}}
app.kubernetes.io/part-of: cozyplane
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "cozyplane.apiserver.name" -}}cozyplane-apiserver{{- end }}

{{- define "cozyplane.apiserver.tlsSecret" -}}
{{- if .Values.tls.secretName }}{{ .Values.tls.secretName }}{{ else }}cozyplane-apiserver-tls{{ end }}
{{- end }}

{{- define "cozyplane.image" -}}
{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end }}
