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

{{- /* An image reference: repository@digest when image.<name>.digest is set (and then it must
       be a sha256 digest), else repository:tag with the tag defaulting to the appVersion.
       Called with (dict "image" .Values.image.<name> "name" "<name>" "root" .). */}}
{{- define "cozyplane.image" -}}
{{- with .image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail (printf "image.%s.digest %q is not a digest: sha256:<64 lowercase hex digits>" $.name .) -}}
{{- end -}}
{{ $.image.repository }}@{{ . }}
{{- else -}}
{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end }}

{{- /* The cluster's DNS domain: clusterDomain, else the platform's `_cluster.cluster-domain`
       (Cozystack's cozystack-values), else rendering fails. */}}
{{- define "cozyplane.clusterDomain" -}}
{{- $platform := dig "cluster-domain" "" (.Values._cluster | default dict) -}}
{{- required "clusterDomain is required: the cluster's DNS domain (cluster.local; Cozystack: cozy.local)" (.Values.clusterDomain | default $platform) -}}
{{- end }}

{{- /* The CNI network configuration the agent's init container installs. The agent that is
       the Service proxy (agent.kubeProxyReplacement) serves hostPorts in eBPF itself, so
       `portmap` is chained only when kube-proxy keeps the Services: chained beside the agent,
       it would add iptables DNAT rules for the same ports. One name on the node either way
       (the files differ by directory), so switching replaces the other. */}}
{{- define "cozyplane.conflist" -}}
{{- if .Values.agent.kubeProxyReplacement -}}
{{- .Files.Get "files/kube-proxy-replacement/10-cozyplane.conflist" -}}
{{- else -}}
{{- .Files.Get "files/10-cozyplane.conflist" -}}
{{- end -}}
{{- end }}
