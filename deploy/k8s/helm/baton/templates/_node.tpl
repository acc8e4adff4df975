{{/*
The Deployment of a node pool (prefill or decode): the same pod shape for both, with the role's
binary, flags and speculative config; decode pods may carry the proposer sidecar.
Takes (dict "root" $ "component" "prefill|decode").
*/}}
{{- define "baton.nodeDeployment" -}}
{{- $ := .root -}}
{{- $component := .component -}}
{{- $n := index $.Values $component -}}
{{- $isDecode := eq $component "decode" -}}
{{- $spec := ternary (include "baton.decodeSpec" $) (include "baton.prefillSpec" $) $isDecode -}}
{{- $sidecar := and $isDecode $.Values.proposer.enabled (eq $.Values.proposer.mode "sidecar") -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "baton.componentName" . }}
  labels:
    {{- include "baton.labels" . | nindent 4 }}
spec:
  {{- if not (include "baton.autoscaled" .) }}
  replicas: {{ $n.replicas }}
  {{- end }}
  {{- with include "baton.strategy" . | trim }}
  strategy:
    {{- . | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "baton.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "baton.labels" . | nindent 8 }}
        {{- with $n.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- $annotations := merge (dict) $n.podAnnotations (fromYaml (include "baton.scrapeAnnotations" $)) }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      # A terminating node takes no new requests and lets running ones finish for
      # drainTimeoutSeconds; a few seconds more before SIGKILL.
      terminationGracePeriodSeconds: {{ add $n.drainTimeoutSeconds 5 }}
      # Baton never calls the Kubernetes API: no token in the pod to steal.
      automountServiceAccountToken: false
      {{- with $.Values.image.pullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with include "baton.podSecurityContext" (dict "root" $ "pool" $n) }}
      securityContext:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with include "baton.podExtras" $n | trim }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- $inits := include "baton.modelInitContainers" . | trim }}
      {{- if or $inits $sidecar }}
      initContainers:
        {{- with $inits }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- if $sidecar }}
        {{- /* A native sidecar (restartPolicy Always): it starts before the decode container and
        lives beside it, restarting on its own; it has no readiness probe, so a crashing proposer
        never takes a decode pod (which drafts locally meanwhile) out of its Service. */}}
        {{- include "baton.proposerContainer" $ | trim | nindent 8 }}
        {{- end }}
      {{- end }}
      containers:
        - name: {{ $component }}
          image: {{ include "baton.image" $ }}
          imagePullPolicy: {{ $.Values.image.pullPolicy }}
          command: [{{ ternary "baton-decode" "baton-prefill" $isDecode | quote }}]
          args:
            - --model
            - {{ include "baton.modelPath" $ | quote }}
            - --served-model-name
            - {{ include "baton.servedModelName" $ | quote }}
            - --host
            - 0.0.0.0
            - --port
            - {{ $n.port | int | quote }}
            # The address the router and the metrics' node label know this pod by.
            - --advertise-host
            - $(POD_IP)
            - --transport
            - {{ $n.transport | quote }}
            {{- if $isDecode }}
            - --role
            - {{ ternary "decode" "both" (include "baton.hasPrefill" $ | eq "true") }}
            {{- else }}
            - --kv-transfer-timeout-ms
            - {{ mul $n.kvTransferTimeoutSeconds 1000 | int | quote }}
            {{- end }}
            {{- with $spec }}
            - --speculative-config
            - {{ . | quote }}
            {{- with $.Values.additionalConfig }}
            - --additional-config
            - {{ toJson . | quote }}
            {{- end }}
            {{- with $.Values.kvTransferConfig }}
            - --kv-transfer-config
            - {{ toJson . | quote }}
            {{- end }}
            {{- end }}
            {{- with include "baton.engineArgs" . | trim }}
            {{- . | nindent 12 }}
            {{- end }}
            - --drain-timeout-ms
            - {{ mul $n.drainTimeoutSeconds 1000 | int | quote }}
            {{- include "baton.securityArgs" $ | nindent 12 }}
            {{- if eq $.Values.discovery.mode "register" }}
            - --register-with
            - {{ printf "%s.%s.svc.%s:%d" (include "baton.suffixedName" (dict "root" $ "suffix" "router-internal")) $.Release.Namespace $.Values.clusterDomain (int $.Values.router.internalPort) }}
            {{- end }}
            {{- if $.Values.metrics.enabled }}
            - --metrics-port
            - {{ $.Values.metrics.port | int | quote }}
            {{- end }}
            {{- with $n.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            {{- include "baton.podEnv" $ | nindent 12 }}
            {{- with $n.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: grpc
              containerPort: {{ $n.port }}
            {{- if $.Values.metrics.enabled }}
            - name: metrics
              containerPort: {{ $.Values.metrics.port }}
            {{- end }}
          {{- include "baton.grpcProbes" (dict "root" $ "port" $n.port "probes" $n.probes) | trim | nindent 10 }}
          {{- with include "baton.nodeResources" . | trim }}
          resources:
            {{- . | nindent 12 }}
          {{- end }}
          {{- with include "baton.securityContext" (dict "root" $ "pool" $n) }}
          securityContext:
            {{- . | nindent 12 }}
          {{- end }}
          {{- with print (include "baton.modelMounts" $) (include "baton.tlsMount" $) (include "baton.hiddenStatesMount" $) | trim }}
          volumeMounts:
            {{- . | nindent 12 }}
            {{- with $n.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- else }}
          {{- with $n.extraVolumeMounts }}
          volumeMounts:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- end }}
      {{- with print (include "baton.modelVolumes" $) (include "baton.tlsVolume" $) (include "baton.hiddenStatesVolume" $) | trim }}
      volumes:
        {{- . | nindent 8 }}
        {{- with $n.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- else }}
      {{- with $n.extraVolumes }}
      volumes:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- end }}
      {{- with $n.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $n.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $n.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* The baton-proposer container: a native sidecar in decode pods (an init container with
restartPolicy Always, without a readiness probe), or the proposer Deployment's. proposer.resources,
extraArgs, securityContext and probes apply in both modes; extraVolumeMounts in deployment mode. */}}
{{- define "baton.proposerContainer" -}}
{{- $p := .Values.proposer -}}
{{- $native := eq $p.mode "sidecar" -}}
- name: proposer
  {{- if $native }}
  restartPolicy: Always
  {{- end }}
  image: {{ include "baton.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["baton-proposer"]
  args:
    - --host
    - 0.0.0.0
    - --port
    - {{ $p.port | int | quote }}
    - --max-cached-requests
    - {{ $p.maxCachedRequests | int | quote }}
    - --cache-scope
    - {{ $p.cacheScope | quote }}
    {{- include "baton.securityArgs" . | nindent 4 }}
    {{- if .Values.metrics.enabled }}
    - --metrics-port
    - {{ add .Values.metrics.port 1 | int | quote }}
    - --served-model-name
    - {{ include "baton.servedModelName" . | quote }}
    {{- end }}
    {{- with $p.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: proposer
      containerPort: {{ $p.port }}
    {{- if .Values.metrics.enabled }}
    - name: proposer-metrics
      containerPort: {{ add .Values.metrics.port 1 }}
    {{- end }}
  {{- /* The sidecar: a startup and a liveness probe, no readiness probe (it never gates the decode
  pod). Its own Deployment: readiness (it leaves its Service while down) and liveness. */}}
  {{- $liveness := dict "periodSeconds" 10 "timeoutSeconds" 5 "failureThreshold" 6 }}
  {{- $defaults := dict "readiness" (dict "periodSeconds" 5 "timeoutSeconds" 5 "failureThreshold" 3) "liveness" $liveness }}
  {{- if $native }}
  {{- $defaults = dict "startup" (dict "periodSeconds" 2 "timeoutSeconds" 5 "failureThreshold" 30) "liveness" $liveness }}
  {{- end }}
  {{- include "baton.grpcProbes" (dict "root" . "port" $p.port "probes" $p.probes "defaults" $defaults) | trim | nindent 2 }}
  {{- $mounts := include "baton.tlsMount" . | trim }}
  {{- if or $mounts (and (not $native) $p.extraVolumeMounts) }}
  volumeMounts:
    {{- with $mounts }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- if not $native }}
    {{- with $p.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- end }}
  {{- end }}
  {{- with $p.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with include "baton.securityContext" (dict "root" . "pool" $p) }}
  securityContext:
    {{- . | nindent 4 }}
  {{- end }}
{{- end -}}
