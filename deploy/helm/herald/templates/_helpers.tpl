{{/*
The app name: the selector label of every object (nameOverride, default "herald"). Two releases in
one namespace need different names.
*/}}
{{- define "herald.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The objects' name: fullnameOverride, else the release name when it holds the app name, else
<release>-<name>.
*/}}
{{- define "herald.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "herald.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The labels every object carries (the kustomize base's `labels:`), plus .Values.labels. */}}
{{- define "herald.labels" -}}
app.kubernetes.io/name: {{ include "herald.name" . }}
app.kubernetes.io/part-of: herald
{{- with .Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "herald.selectorLabels" -}}
app.kubernetes.io/name: {{ include "herald.name" . }}
{{- end -}}

{{- define "herald.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "herald.fullname" .)) -}}
{{- end -}}

{{- define "herald.tokensSecret" -}}
{{- .Values.tokens.secretName | default (printf "%s-tokens" (include "herald.fullname" .)) -}}
{{- end -}}

{{/*
herald's job file: .Values.config as given, with the listen address, token and TLS files of
server: (and of kube_api: when kubeApi.enabled) set to the chart's port and mounts. Keys come out
sorted (toYaml), so the kustomize tree's jobs.yaml files are this text exactly.
*/}}
{{- define "herald.jobFile" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $paths := dict "token_file" "/etc/herald/tokens/tokens" "tls_cert_file" "/etc/herald/tls/tls.crt" "tls_key_file" "/etc/herald/tls/tls.key" -}}
{{- $server := merge (dict "listen" (printf "0.0.0.0:%d" (int .Values.port))) (deepCopy $paths) (get $cfg "server" | default dict) -}}
{{- $_ := set $cfg "server" $server -}}
{{- if .Values.kubeApi.enabled -}}
{{- $kube := merge (dict "listen" (printf "0.0.0.0:%d" (int .Values.kubeApi.port)) "kinds" .Values.kubeApi.kinds) (deepCopy $paths) (get $cfg "kube_api" | default dict) -}}
{{- $_ := set $cfg "kube_api" $kube -}}
{{- end -}}
{{- printf "%s\n" (toYaml $cfg) -}}
{{- end -}}

{{/*
The job ConfigMap's name: <fullname>-jobs-<hash>, the hash computed as kustomize's configMapGenerator
computes it (sigs.k8s.io/kustomize/api hasher/hasher.go: sha256 of the JSON of kind, name and data,
ten hex digits with 0 1 3 a e replaced by g h k m t), so a changed job file rolls the pods and both
trees name the ConfigMap alike. NB: its getNodeValues looks up "metadata/name" as one field name,
finds none and hashes the name as "".
*/}}
{{- define "herald.jobsConfigMap" -}}
{{- $name := printf "%s-jobs" (include "herald.fullname" .) -}}
{{- $hash := dict "kind" "ConfigMap" "name" "" "data" (dict "jobs.yaml" (include "herald.jobFile" .)) | toJson | sha256sum | trunc 10 -}}
{{- printf "%s-%s" $name ($hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t") -}}
{{- end -}}
