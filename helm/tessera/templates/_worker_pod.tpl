{{/*
The worker pod template, shared by the StatefulSet and the LeaderWorkerSet. Call with
(list $ "statefulset"|"leaderworkerset"): the two differ only in where a pod learns its
replica and rank (hints for the coordinator, which forms the groups).
*/}}
{{- define "tessera.workerPodTemplate" -}}
{{- $root := index . 0 }}
{{- $mode := index . 1 }}
{{- $w := $root.Values.worker }}
{{- $gpus := int $w.gpusPerWorker -}}
metadata:
  labels:
    {{- include "tessera.workerSelectorLabels" $root | nindent 4 }}
    {{- with $w.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $w.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  serviceAccountName: {{ include "tessera.serviceAccountName" $root }}
  automountServiceAccountToken: false
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $root.Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ $w.terminationGracePeriodSeconds }}
  {{- with (include "tessera.modelInitContainers" (list $root "worker")) }}
  initContainers:
    {{- . | nindent 4 }}
  {{- end }}
  containers:
    - name: worker
      image: {{ include "tessera.image" (list $root "worker") | quote }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      # A shell computes the replica/rank hints from the pod's index, then execs the
      # worker, so tessera-worker is PID 1 and receives SIGTERM itself.
      command: ["/bin/sh", "-c"]
      args:
        - >-
          exec tessera-worker
          --coordinator={{ include "tessera.coordinatorClusterAddress" $root }}
          --listen=0.0.0.0:{{ $w.port }}
          --advertise-host="${POD_IP}"
          --metrics-port={{ $w.metricsPort }}
          --device={{ include "tessera.workerDevice" $root }}
          --threads={{ $w.threads }}
          {{- with $root.Values.auth.joinSecret }}
          --join-secret-file=/etc/tessera/join-secret/{{ $root.Values.auth.joinSecretKey }}
          {{- end }}
          {{- range (splitList "\n" (include "tessera.clusterSecurityArgs" $root | trim)) }}
          {{ . }}
          {{- end }}
          {{- if eq $mode "leaderworkerset" }}
          --replica-hint="${GROUP_INDEX}"
          --rank-hint="${LWS_WORKER_INDEX}"
          {{- else }}
          --replica-hint="$((POD_INDEX / {{ $root.Values.tp }}))"
          --rank-hint="$((POD_INDEX % {{ $root.Values.tp }}))"
          {{- end }}
          {{- range $w.extraArgs }}
          {{ . | squote }}
          {{- end }}
      env:
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        # A .gguf model.path is translated into a few small documents here (see the coordinator).
        - name: TESSERA_CACHE_DIR
          value: /tmp/tessera-cache
        {{- if eq $mode "leaderworkerset" }}
        # LWS_WORKER_INDEX (the rank within the group) is injected by the LWS controller.
        - name: GROUP_INDEX
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['leaderworkerset.sigs.k8s.io/group-index']
        {{- else }}
        - name: POD_INDEX
          valueFrom:
            fieldRef:
              fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
        {{- end }}
        {{- with $w.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: grpc
          containerPort: {{ $w.port }}
          protocol: TCP
        - name: metrics
          containerPort: {{ $w.metricsPort }}
          protocol: TCP
      # HTTP on the metrics port, not gRPC health on the worker port: that port requires a
      # cluster client certificate (mutual TLS), which the kubelet does not have.
      startupProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: {{ $w.probes.startup.periodSeconds }}
        failureThreshold: {{ $w.probes.startup.failureThreshold }}
      readinessProbe:
        # Ready only in a formed group (a worker waiting for its group, or re-registering
        # after its coordinator or a peer was lost, is not).
        httpGet:
          path: /readyz
          port: metrics
        periodSeconds: {{ $w.probes.readiness.periodSeconds }}
        failureThreshold: {{ $w.probes.readiness.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: {{ $w.probes.liveness.periodSeconds }}
        failureThreshold: {{ $w.probes.liveness.failureThreshold }}
      resources:
        {{- $res := deepCopy $w.resources }}
        {{- if gt $gpus 0 }}
        {{- $_ := set $res "limits" (merge (dict $w.gpuResource $gpus) (default (dict) $res.limits)) }}
        {{- $_ := set $res "requests" (merge (dict $w.gpuResource $gpus) (default (dict) $res.requests)) }}
        {{- end }}
        {{- toYaml $res | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "tessera.modelMount" $root | nindent 8 }}
        - name: dshm
          mountPath: /dev/shm
        - name: tmp
          mountPath: /tmp
        {{- if $root.Values.auth.joinSecret }}
        - name: join-secret
          mountPath: /etc/tessera/join-secret
          readOnly: true
        {{- end }}
        {{- if include "tessera.clusterTlsSecretName" $root }}
        - name: cluster-tls
          mountPath: {{ include "tessera.clusterTlsMountPath" $root }}
          readOnly: true
        {{- end }}
  volumes:
    {{- include "tessera.modelVolume" $root | nindent 4 }}
    # Shared-memory collectives between ranks on one node (and NCCL) need a /dev/shm far
    # larger than the runtime's 64 MiB default.
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $w.shmSize }}
    - name: tmp
      emptyDir: {}
    {{- with $root.Values.auth.joinSecret }}
    - name: join-secret
      secret:
        secretName: {{ . }}
        defaultMode: 0440  # Group-readable: the pod runs as a non-root user in fsGroup.
    {{- end }}
    {{- with (include "tessera.clusterTlsSecretName" $root) }}
    - name: cluster-tls
      secret:
        secretName: {{ . }}
        defaultMode: 0440  # Group-readable: the pod runs as a non-root user in fsGroup.
    {{- end }}
  {{- with $w.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $w.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $w.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $w.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
