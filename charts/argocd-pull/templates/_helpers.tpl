{{/* Chart name (nameOverride wins). */}}
{{- define "argocd-pull.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name: "argocd-pull" for a release named argocd-pull. */}}
{{- define "argocd-pull.fullname" -}}
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

{{/* Name of the controller's Deployment, ServiceAccount, ClusterRole and Lease. */}}
{{- define "argocd-pull.controllerName" -}}
{{- printf "%s-controller" (include "argocd-pull.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "argocd-pull.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "argocd-pull.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "argocd-pull.controllerName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "argocd-pull.selectorLabels" -}}
app.kubernetes.io/name: {{ include "argocd-pull.controllerName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "argocd-pull.labels" -}}
{{ include "argocd-pull.selectorLabels" . }}
app.kubernetes.io/part-of: argocd-pull
app.kubernetes.io/component: controller
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "argocd-pull.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}
