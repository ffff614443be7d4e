{{- define "argocd-pull-principal.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "argocd-pull-principal.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "argocd-pull-principal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "argocd-pull-principal.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "argocd-pull-principal.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "argocd-pull-principal.labels" -}}
{{ include "argocd-pull-principal.selectorLabels" . }}
app.kubernetes.io/part-of: argocd-pull
app.kubernetes.io/component: principal
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "argocd-pull-principal.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- /*
The principal's HA mode: "" (one replica), "active-passive" (--leader-elect: the Lease holder
serves, the others forward to it) or "active-active" (every replica serves its shards of the
agents). principal.ha.enabled=true with an empty mode is active-passive (the value it always
meant); with a mode set, the mode decides.
*/}}
{{- define "argocd-pull-principal.haMode" -}}
{{- $ha := .Values.principal.ha }}
{{- $mode := default "" $ha.mode }}
{{- if not (has $mode (list "" "active-passive" "active-active")) }}
{{- fail (printf "principal.ha.mode %q is not supported: use active-passive (one replica serves, the others stand by) or active-active (every replica serves a share of the agents), or leave it empty for one replica" $mode) }}
{{- end }}
{{- if and (eq $mode "") $ha.enabled }}
{{- $mode = "active-passive" }}
{{- end }}
{{- $mode }}
{{- end }}
