{{/* Names and labels. */}}
{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tessera.fullname" -}}
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

{{- define "tessera.coordinatorName" -}}
{{- printf "%s-coordinator" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The public API's TLS Secret; empty (tls.enabled false): plaintext. */}}
{{- define "tessera.tlsSecretName" -}}
{{- if .Values.tls.enabled }}
{{- default (printf "%s-tls" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-") .Values.tls.secretName }}
{{- end }}
{{- end }}

{{- define "tessera.tlsMountPath" -}}/etc/tessera/tls{{- end }}

{{/* The cluster-TLS Secret (ca.crt, tls.crt, tls.key); empty when cluster.tls is off. */}}
{{- define "tessera.clusterTlsSecretName" -}}
{{- if .Values.cluster.tls.enabled }}
{{- default (printf "%s-cluster-tls" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-") .Values.cluster.tls.secretName }}
{{- end }}
{{- end }}

{{- define "tessera.clusterServerName" -}}
{{- default (include "tessera.clusterServiceName" .) .Values.cluster.tls.serverName }}
{{- end }}

{{- define "tessera.clusterTlsMountPath" -}}/etc/tessera/cluster-tls{{- end }}

{{/* The cluster-security flags of the coordinator and of every worker, one per line. */}}
{{- define "tessera.clusterSecurityArgs" -}}
{{- if .Values.cluster.tls.enabled }}
{{- $dir := include "tessera.clusterTlsMountPath" . }}
--cluster-ca={{ $dir }}/ca.crt
--cluster-cert={{ $dir }}/tls.crt
--cluster-key={{ $dir }}/tls.key
--cluster-server-name={{ include "tessera.clusterServerName" . }}
{{- else }}
--insecure
{{- end }}
{{- end }}

{{- define "tessera.clusterServiceName" -}}
{{- printf "%s-cluster" (include "tessera.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tessera.workerName" -}}
{{- printf "%s-worker" (include "tessera.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "tessera.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tessera.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tessera
{{- end }}

{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tessera.coordinatorSelectorLabels" -}}
{{ include "tessera.selectorLabels" . }}
app.kubernetes.io/component: coordinator
{{- end }}

{{- define "tessera.workerSelectorLabels" -}}
{{ include "tessera.selectorLabels" . }}
app.kubernetes.io/component: worker
{{- end }}

{{- define "tessera.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tessera.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Images: one repository, a -cpu and a -cuda variant. Call with (list $ "cpu"|"worker"). */}}
{{- define "tessera.image" -}}
{{- $root := index . 0 }}
{{- $role := index . 1 }}
{{- $v := $root.Values.image }}
{{- $variant := $v.variant }}
{{- if eq $variant "auto" }}
{{- $variant = ternary "cuda" "cpu" (and (eq $role "worker") (gt (int $root.Values.worker.gpusPerWorker) 0)) }}
{{- end }}
{{- $tag := default $root.Chart.AppVersion $v.tag }}
{{- if $variant }}{{ $tag = printf "%s-%s" $tag $variant }}{{ end }}
{{- printf "%s:%s" $v.repository $tag }}
{{- end }}

{{- define "tessera.workerDevice" -}}
{{- if .Values.worker.device }}{{ .Values.worker.device }}{{ else }}{{ ternary "cuda" "cpu" (gt (int .Values.worker.gpusPerWorker) 0) }}{{ end }}
{{- end }}

{{- define "tessera.workerCount" -}}
{{- mul (int .Values.tp) (int .Values.replicas) }}
{{- end }}

{{/* Address workers register on: the cluster Service of the coordinator. */}}
{{- define "tessera.coordinatorClusterAddress" -}}
{{- printf "%s.%s.svc:%d" (include "tessera.clusterServiceName" .) .Release.Namespace (int .Values.coordinator.clusterPort) }}
{{- end }}

{{/* The model volume. */}}
{{- define "tessera.modelVolume" -}}
- name: model
{{- if eq .Values.model.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ required "model.pvc.claimName is required when model.source is pvc" .Values.model.pvc.claimName }}
    readOnly: true
{{- else if eq .Values.model.source "hostPath" }}
  hostPath:
    path: {{ required "model.hostPath.path is required when model.source is hostPath" .Values.model.hostPath.path }}
    type: Directory
{{- else }}
  emptyDir:
    sizeLimit: {{ .Values.model.objectStore.sizeLimit }}
{{- end }}
{{- end }}

{{- define "tessera.modelMount" -}}
- name: model
  mountPath: {{ .Values.model.mountPath }}
  readOnly: {{ ne .Values.model.source "objectStore" }}
{{- if and (eq .Values.model.source "pvc") .Values.model.pvc.subPath }}
  subPath: {{ .Values.model.pvc.subPath }}
{{- end }}
{{- end }}

{{/* The copy from an object store (model.source objectStore). Call with (list $ "coordinator"|"worker"). */}}
{{- define "tessera.modelInitContainers" -}}
{{- $root := index . 0 }}
{{- $role := index . 1 }}
{{- if eq $root.Values.model.source "objectStore" }}
{{- $o := $root.Values.model.objectStore -}}
- name: fetch-model
  image: {{ $o.image }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    - copy
    - {{ required "model.objectStore.url is required when model.source is objectStore" $o.url | quote }}
    - {{ $root.Values.model.path | quote }}
    {{- if eq $role "coordinator" }}
    # The coordinator reads only config.json and the tokenizer, never the weights.
    - --exclude=*.safetensors
    {{- end }}
  env:
    # The root filesystem is read-only: rclone keeps its (empty) config in /tmp.
    - name: RCLONE_CONFIG
      value: /tmp/rclone.conf
    {{- with $o.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $o.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: model
      mountPath: {{ $root.Values.model.mountPath }}
    - name: tmp
      mountPath: /tmp
{{- end }}
{{- end }}
