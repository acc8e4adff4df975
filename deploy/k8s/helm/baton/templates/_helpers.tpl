{{/*
Shared definitions of the Baton chart: names, labels, the image, the model volume, the engine
flags, and the speculative configs of prefill and decode nodes with the P/D rule that binds them.
Component helpers take (dict "root" $ "component" "router|prefill|decode|proposer").
*/}}

{{/* The chart's name in labels and names: nameOverride, else the chart's. */}}
{{- define "baton.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Every object's name starts with this: fullnameOverride, else <release>-<name> (the release
name alone when it already contains the name), at most 63 characters. */}}
{{- define "baton.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "baton.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* <fullname>-<suffix> in at most 63 characters: the fullname is shortened, never the suffix, so
that a long fullnameOverride still gives every object a distinct name. Takes (dict "root" $
"suffix" s). */}}
{{- define "baton.suffixedName" -}}
{{- $room := sub 62 (len .suffix) | int -}}
{{- printf "%s-%s" (include "baton.fullname" .root | trunc $room | trimSuffix "-") .suffix -}}
{{- end -}}

{{/* <fullname>-<component>, at most 63 characters. */}}
{{- define "baton.componentName" -}}
{{- include "baton.suffixedName" (dict "root" .root "suffix" .component) -}}
{{- end -}}

{{/* The headless Service of a node pool: pods' DNS records for the router. */}}
{{- define "baton.headlessName" -}}
{{- include "baton.suffixedName" (dict "root" .root "suffix" (printf "%s-headless" .component)) -}}
{{- end -}}

{{- define "baton.selectorLabels" -}}
app.kubernetes.io/name: {{ include "baton.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "baton.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{ include "baton.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: baton
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "baton.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if and (eq .Values.image.variant "cuda") (not .Values.image.tag) -}}
{{- $tag = printf "%s-cuda" $tag -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* The target model's directory inside the containers. */}}
{{- define "baton.modelPath" -}}
{{- if .Values.model.path -}}
{{- .Values.model.path -}}
{{- else if eq .Values.model.source "bundled" -}}
/opt/baton/models/baton-tiny-code/target
{{- else -}}
{{- .Values.model.mountPath -}}
{{- end -}}
{{- end -}}

{{/* The pod's model volume (nothing for bundled). */}}
{{/* The model id clients use (router.servedModelName, else the model directory's base name, as
the router derives it): every process's model_name metric label. */}}
{{- define "baton.servedModelName" -}}
{{- .Values.router.servedModelName | default (base (include "baton.modelPath" .)) -}}
{{- end -}}

{{- define "baton.modelVolumes" -}}
{{- $m := .Values.model -}}
{{- if eq $m.source "pvc" }}
- name: model
  persistentVolumeClaim:
    claimName: {{ required "model.pvc.claimName is required when model.source is pvc" $m.pvc.claimName }}
    readOnly: true
{{- else if eq $m.source "hostPath" }}
- name: model
  hostPath:
    path: {{ required "model.hostPath.path is required when model.source is hostPath" $m.hostPath.path }}
    type: {{ $m.hostPath.type }}
{{- else if eq $m.source "initContainer" }}
- name: model
  emptyDir:
    sizeLimit: {{ $m.initContainer.sizeLimit }}
{{- end }}
{{- end -}}

{{/* The serving containers' mount of the model volume (read-only). */}}
{{- define "baton.modelMounts" -}}
{{- $m := .Values.model -}}
{{- if ne $m.source "bundled" }}
- name: model
  mountPath: {{ $m.mountPath }}
  readOnly: true
  {{- if and (eq $m.source "pvc") $m.pvc.subPath }}
  subPath: {{ $m.pvc.subPath }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The init container that fills the model volume (source initContainer only). */}}
{{- define "baton.modelInitContainers" -}}
{{- $m := .root.Values.model -}}
{{- if eq $m.source "initContainer" }}
- name: fetch-model
  image: {{ required "model.initContainer.image is required when model.source is initContainer" $m.initContainer.image }}
  {{- with $m.initContainer.command }}
  command:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $m.initContainer.args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  env:
    - name: BATON_MODEL_DIR
      value: {{ $m.mountPath | quote }}
    # The router needs only the tokenizer files; a fetch script may skip the weights for it.
    - name: BATON_COMPONENT
      value: {{ .component }}
    {{- with $m.initContainer.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $m.initContainer.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: model
      mountPath: {{ $m.mountPath }}
{{- end }}
{{- end -}}

{{/* A node pool's engine values as JSON: the shared engine values overridden key by key by the
pool's. Takes (dict "root" $ "component" "prefill|decode"). */}}
{{- define "baton.engineValues" -}}
{{- merge (deepCopy (index .root.Values .component "engine" | default dict)) (deepCopy .root.Values.engine) | toJson -}}
{{- end -}}

{{/* Where a node pool's engine runs: engine.device (the pool's, else the shared one), or by
default cuda with the CUDA image and cpu with the CPU one. Takes (dict "root" $ "component" ...). */}}
{{- define "baton.device" -}}
{{- $e := include "baton.engineValues" . | fromJson -}}
{{- if $e.device -}}{{ $e.device }}{{- else -}}{{ ternary "cuda" "cpu" (eq .root.Values.image.variant "cuda") }}{{- end -}}
{{- end -}}

{{/* A node pool's container resources: the pool's, plus one nvidia.com/gpu limit when its engine
runs on CUDA and the pool's limits name no GPU count (one engine drives one GPU). */}}
{{- define "baton.nodeResources" -}}
{{- $r := deepCopy (index .root.Values .component "resources" | default dict) -}}
{{- if hasPrefix "cuda" (include "baton.device" .) -}}
{{- $limits := $r.limits | default dict -}}
{{- if not (hasKey $limits "nvidia.com/gpu") -}}
{{- $_ := set $limits "nvidia.com/gpu" 1 -}}
{{- end -}}
{{- $_ := set $r "limits" $limits -}}
{{- end -}}
{{- with $r }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Engine flags of a node pool: the shared engine values overridden by the pool's. */}}
{{- define "baton.engineArgs" -}}
{{- $e := include "baton.engineValues" . | fromJson -}}
{{- with include "baton.device" . -}}
{{- if ne . "cpu" }}
- --device
- {{ . | quote }}
{{- end -}}
{{- end -}}
{{- with $e.graphs }}
- --graphs
- {{ . | quote }}
{{- end -}}
{{- if not (kindIs "invalid" $e.graphMaxBatchSize) }}
- --graph-max-batch-size
- {{ $e.graphMaxBatchSize | int | quote }}
{{- end -}}
{{- if not (kindIs "invalid" $e.threads) }}
- --threads
- {{ $e.threads | int | quote }}
{{- end }}
{{- if not (kindIs "invalid" $e.kvCacheMemoryGiB) }}
- --kv-cache-memory
- {{ $e.kvCacheMemoryGiB | toString | quote }}
{{- end }}
{{- if not (kindIs "invalid" $e.maxModelLen) }}
- --max-model-len
- {{ $e.maxModelLen | int | quote }}
{{- end }}
{{- if not (kindIs "invalid" $e.maxNumSeqs) }}
- --max-num-seqs
- {{ $e.maxNumSeqs | int | quote }}
{{- end }}
{{- if not (kindIs "invalid" $e.maxNumBatchedTokens) }}
- --max-num-batched-tokens
- {{ $e.maxNumBatchedTokens | int | quote }}
{{- end }}
{{- if and $e.dtype (ne $e.dtype "auto") }}
- --dtype
- {{ $e.dtype | quote }}
{{- end }}
{{- if and $e.kvCacheDtype (ne $e.kvCacheDtype "auto") }}
- --kv-cache-dtype
- {{ $e.kvCacheDtype | quote }}
{{- end }}
{{- end -}}

{{/* Does a prefill pool exist (fixed replicas or an autoscaler)? "true" or "". */}}
{{- define "baton.hasPrefill" -}}
{{- if or (gt (int .Values.prefill.replicas) 0) (include "baton.autoscaled" (dict "root" . "component" "prefill")) -}}true{{- end -}}
{{- end -}}

{{/* Does an autoscaler (an HPA or a KEDA ScaledObject) own a pool's replicas? "true" or "".
Takes (dict "root" $ "component" "prefill|decode"). */}}
{{- define "baton.autoscaled" -}}
{{- $a := (index .root.Values .component).autoscaling -}}
{{- if or $a.enabled $a.keda.enabled -}}true{{- end -}}
{{- end -}}

{{/* The proposer's address as a decode node reaches it. */}}
{{- define "baton.proposerEndpoint" -}}
{{- if eq .Values.proposer.mode "sidecar" -}}
{{- printf "127.0.0.1:%d" (int .Values.proposer.port) -}}
{{- else -}}
{{- printf "%s.%s.svc.%s:%d" (include "baton.componentName" (dict "root" . "component" "proposer")) .Release.Namespace .Values.clusterDomain (int .Values.proposer.port) -}}
{{- end -}}
{{- end -}}

{{/* speculativeConfig as JSON ("" without speculation): the value itself when it is a map ({}
     meaning none); when null, the bundled family's EAGLE-3 head for model.source bundled and no
     speculation otherwise. A default map in values.yaml would be deep-merged with the user's
     (a suffix config would inherit the EAGLE-3 head's "model"), hence null. */}}
{{- define "baton.speculativeConfig" -}}
{{- $c := .Values.speculativeConfig -}}
{{- if kindIs "map" $c -}}
{{- if $c }}{{ toJson $c }}{{ end -}}
{{- else if eq .Values.model.source "bundled" -}}
{{- toJson (dict "method" "eagle3" "num_speculative_tokens" 4 "model" "/opt/baton/models/baton-tiny-code/eagle3") -}}
{{- end -}}
{{- end -}}

{{/* The decode nodes' speculative config as JSON ("" without speculation). */}}
{{- define "baton.decodeSpec" -}}
{{- with include "baton.speculativeConfig" . -}}
{{- $c := fromJson . -}}
{{- if $.Values.proposer.enabled -}}
{{- $_ := set $c "proposer_endpoint" (include "baton.proposerEndpoint" $) -}}
{{- $_ := set $c "proposer_budget_ms" $.Values.proposer.budgetMs -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}
{{- end -}}

{{/* The prefill nodes' speculative config as JSON ("" without speculation): prefill.speculativeConfig
     when set ({} meaning none), else the decode nodes' config (without the proposer keys) with
     num_speculative_tokens 1 (the decode k for hybrid recurrent models). */}}
{{- define "baton.prefillSpec" -}}
{{- $own := .Values.prefill.speculativeConfig -}}
{{- if kindIs "map" $own -}}
{{- if $own -}}
{{- toJson $own -}}
{{- end -}}
{{- else -}}
{{- with include "baton.speculativeConfig" . -}}
{{- $c := fromJson . -}}
{{- if not $.Values.model.hybridRecurrent -}}
{{- $_ := set $c "num_speculative_tokens" 1 -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "method M, num_speculative_tokens K" or "no speculation", for messages. */}}
{{- define "baton.describeSpec" -}}
{{- if . -}}
{{- printf "method %v, num_speculative_tokens %v" .method .num_speculative_tokens -}}
{{- else -}}
no speculation
{{- end -}}
{{- end -}}

{{/*
Refuses values that break what the binaries would refuse at start-up, so that a bad release fails
at `helm install` instead of in crash-looping pods. Mirrors common/pd_rule.cc.
*/}}
{{- define "baton.validate" -}}
{{- $rule := "the P/D rule: a prefill node runs num_speculative_tokens = 1 and a decode node >= 1; for hybrid models with recurrent layers (model.hybridRecurrent) both run the same k" -}}
{{- $model := ternary "a hybrid model with recurrent layers" "an attention-only model" (.Values.model.hybridRecurrent | default false) -}}
{{- $d := dict -}}
{{- with include "baton.decodeSpec" . }}{{ $d = fromJson . }}{{ end -}}
{{- $p := dict -}}
{{- with include "baton.prefillSpec" . }}{{ $p = fromJson . }}{{ end -}}
{{- range $name, $c := dict "speculativeConfig" $d "prefill.speculativeConfig" $p -}}
{{- if and $c (kindIs "invalid" $c.num_speculative_tokens) -}}
{{- fail (printf "%s.num_speculative_tokens must be set: the chart checks the P/D rule with it (%s)" $name $rule) -}}
{{- end -}}
{{- end -}}
{{- if and $d (lt (int $d.num_speculative_tokens) 1) -}}
{{- fail (printf "P/D rule: speculativeConfig.num_speculative_tokens is %v on the decode nodes; they need k >= 1 (or speculativeConfig: null) — %s" $d.num_speculative_tokens $rule) -}}
{{- end -}}
{{- if include "baton.hasPrefill" . -}}
{{- $pair := printf "[prefill nodes: %s; decode nodes: %s; serving %s]" (include "baton.describeSpec" $p) (include "baton.describeSpec" $d) $model -}}
{{- if and $p (not $d) -}}
{{- fail (printf "P/D rule: the prefill nodes speculate (method %v) but the decode nodes do not %s — %s" $p.method $pair $rule) -}}
{{- end -}}
{{- if and $d (not $p) -}}
{{- if not (has $d.method (list "ngram" "suffix")) -}}
{{- fail (printf "P/D rule: the decode nodes' method %v needs draft-side state from prefill, but the prefill nodes run no speculation %s — %s" $d.method $pair $rule) -}}
{{- end -}}
{{- if .Values.model.hybridRecurrent -}}
{{- fail (printf "P/D rule: this model has recurrent layers, so prefill and decode must use the same num_speculative_tokens %s — %s" $pair $rule) -}}
{{- end -}}
{{- end -}}
{{- if and $p $d -}}
{{- if ne (toString $p.method) (toString $d.method) -}}
{{- fail (printf "P/D rule: prefill uses method %v but decode uses %v; paired nodes must speculate with the same method %s — %s" $p.method $d.method $pair $rule) -}}
{{- end -}}
{{- if .Values.model.hybridRecurrent -}}
{{- if ne (int $p.num_speculative_tokens) (int $d.num_speculative_tokens) -}}
{{- fail (printf "P/D rule: this model has recurrent layers, so prefill and decode must use the same num_speculative_tokens %s — %s" $pair $rule) -}}
{{- end -}}
{{- else if ne (int $p.num_speculative_tokens) 1 -}}
{{- fail (printf "P/D rule: prefill.speculativeConfig.num_speculative_tokens is %v, but prefill nodes must use 1 %s — %s" $p.num_speculative_tokens $pair $rule) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with .Values.additionalConfig -}}
{{- if and .rejection_sampler_config (not $d) -}}
{{- fail "additionalConfig.rejection_sampler_config needs speculativeConfig: the decode nodes verify no drafts without speculation" -}}
{{- end -}}
{{- if and .rejection_sampler_config $d.rejection_sampler_config (ne (toJson .rejection_sampler_config) (toJson $d.rejection_sampler_config)) -}}
{{- fail (printf "additionalConfig.rejection_sampler_config %s contradicts speculativeConfig.rejection_sampler_config %s: set it in one place" (toJson .rejection_sampler_config) (toJson $d.rejection_sampler_config)) -}}
{{- end -}}
{{- end -}}
{{- $extract := and $d (eq (toString $d.method) "extract_hidden_states") -}}
{{- if and .Values.kvTransferConfig (not $extract) -}}
{{- fail (printf "kvTransferConfig is read for speculativeConfig.method extract_hidden_states only (Baton's nodes move KV by themselves); speculativeConfig is %s" (include "baton.describeSpec" $d)) -}}
{{- end -}}
{{- if and $extract (not .Values.kvTransferConfig) -}}
{{- fail "speculativeConfig.method extract_hidden_states needs kvTransferConfig with kv_connector_extra_config.shared_storage_path: where the nodes write the hidden-states files" -}}
{{- end -}}
{{- if .Values.proposer.enabled -}}
{{- if not (and $d (has $d.method (list "ngram" "suffix"))) -}}
{{- fail (printf "proposer.enabled needs speculativeConfig.method ngram or suffix (the proposer sidecar has no model); it is %s" (include "baton.describeSpec" $d)) -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.discovery.mode "register") (gt (int .Values.router.replicas) 1) -}}
{{- fail (printf "discovery.mode register needs router.replicas 1 (it is %v): a node registers with one router pod only; use discovery.mode dns for more routers" .Values.router.replicas) -}}
{{- end -}}
{{- if and .Values.metrics.podMonitor.enabled .Values.metrics.serviceMonitor.enabled -}}
{{- fail "metrics.podMonitor and metrics.serviceMonitor are both enabled: every series would be scraped twice; choose one" -}}
{{- end -}}
{{- if and (or .Values.metrics.podMonitor.enabled .Values.metrics.serviceMonitor.enabled) (not .Values.metrics.enabled) -}}
{{- fail "metrics.podMonitor/serviceMonitor need metrics.enabled" -}}
{{- end -}}
{{- $kvDtypes := dict -}}
{{- range $component := list "prefill" "decode" -}}
{{- $e := include "baton.engineValues" (dict "root" $ "component" $component) | fromJson -}}
{{- $_ := set $kvDtypes $component ($e.kvCacheDtype | default "auto") -}}
{{- end -}}
{{- if and (include "baton.hasPrefill" .) (ne $kvDtypes.prefill $kvDtypes.decode) -}}
{{- fail (printf "prefill nodes keep their KV cache in %s but decode nodes in %s: the router pairs only nodes whose KV layouts match; set engine.kvCacheDtype once for both" $kvDtypes.prefill $kvDtypes.decode) -}}
{{- end -}}
{{- range $component := list "prefill" "decode" -}}
{{- $device := include "baton.device" (dict "root" $ "component" $component) -}}
{{- if and (hasPrefix "cuda" $device) (ne $.Values.image.variant "cuda") -}}
{{- fail (printf "%s nodes: engine.device is %s but image.variant is %s, whose binaries have no CUDA backend; set image.variant: cuda" $component $device $.Values.image.variant) -}}
{{- end -}}
{{- end -}}
{{- if include "baton.hasPrefill" . -}}
{{- $sends := splitList "," .Values.prefill.transport -}}
{{- $shared := false -}}
{{- range splitList "," .Values.decode.transport -}}
{{- if has . $sends -}}{{- $shared = true -}}{{- end -}}
{{- end -}}
{{- if not $shared -}}
{{- fail (printf "prefill nodes send KV over %s but decode nodes receive over %s: they share no transport, and the router would pair none of them" .Values.prefill.transport .Values.decode.transport) -}}
{{- end -}}
{{- end -}}
{{- range $component := list "prefill" "decode" -}}
{{- $device := include "baton.device" (dict "root" $ "component" $component) -}}
{{- if and (eq (index $.Values $component).transport "nccl") (not (hasPrefix "cuda" $device)) -}}
{{- fail (printf "%s nodes: transport nccl needs engine.device cuda (it is %s): NCCL moves KV between GPUs" $component $device) -}}
{{- end -}}
{{- end -}}
{{- if and (include "baton.autoscaled" (dict "root" . "component" "prefill")) (lt (int .Values.prefill.autoscaling.minReplicas) 1) -}}
{{- fail "prefill.autoscaling.minReplicas must be >= 1" -}}
{{- end -}}
{{- range $component := list "prefill" "decode" -}}
{{- $a := (index $.Values $component).autoscaling -}}
{{- if and $a.enabled $a.keda.enabled -}}
{{- fail (printf "%s.autoscaling.enabled (an HPA) and %s.autoscaling.keda.enabled (a KEDA ScaledObject) are both on: KEDA makes an HPA of its own, and two autoscalers would fight over the Deployment's replicas; choose one" $component $component) -}}
{{- end -}}
{{- if $a.keda.enabled -}}
{{- if not $a.keda.serverAddress -}}
{{- fail (printf "%s.autoscaling.keda.serverAddress is required with %s.autoscaling.keda.enabled: the Prometheus KEDA queries (e.g. http://prometheus-operated.monitoring.svc:9090)" $component $component) -}}
{{- end -}}
{{- if not $.Values.metrics.enabled -}}
{{- fail (printf "%s.autoscaling.keda needs metrics.enabled: it scales on %s, which the pods export only with metrics on" $component $a.metricName) -}}
{{- end -}}
{{- end -}}
{{- if gt (int $a.minReplicas) (int $a.maxReplicas) -}}
{{- if or $a.enabled $a.keda.enabled -}}
{{- fail (printf "%s.autoscaling.minReplicas (%v) is above maxReplicas (%v)" $component $a.minReplicas $a.maxReplicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.monitoring.prometheusRule.enabled (not .Values.metrics.enabled) -}}
{{- fail "monitoring.prometheusRule needs metrics.enabled: its alerts read the series the pods export only with metrics on" -}}
{{- end -}}
{{- $r := .Values.router -}}
{{- range $kind := list "ingress" "httpRoute" -}}
{{- if and (index $r $kind).enabled (not $r.http.enabled) -}}
{{- fail (printf "router.%s.enabled routes the router's HTTP (OpenAI) API, but router.http.enabled is false: turn the HTTP API on, or expose the gRPC API through router.service" $kind) -}}
{{- end -}}
{{- end -}}
{{- if and $r.ingress.enabled (not $r.ingress.hosts) -}}
{{- fail "router.ingress.enabled needs router.ingress.hosts: at least one {host, paths} entry (host \"\" for any host)" -}}
{{- end -}}
{{- if and $r.httpRoute.enabled (not $r.httpRoute.parentRefs) -}}
{{- fail "router.httpRoute.enabled needs router.httpRoute.parentRefs: the Gateway (and listener) that serves the route" -}}
{{- end -}}
{{- if and .Values.proposer.enabled (eq .Values.proposer.mode "sidecar") -}}
{{- $p := .Values.proposer -}}
{{- range $key := list "extraVolumes" "extraVolumeMounts" "runtimeClassName" "priorityClassName" "serviceAccountName" "topologySpreadConstraints" "podSecurityContext" "strategy" "nodeSelector" "tolerations" "affinity" "podAnnotations" -}}
{{- if not (empty (index $p $key)) -}}
{{- fail (printf "proposer.%s applies to proposer.mode deployment (the proposer's own pods); in sidecar mode the proposer runs in the decode pods, whose decode.* settings apply" $key) -}}
{{- end -}}
{{- end -}}
{{- if hasKey ($p.probes | default dict) "readiness" -}}
{{- fail "proposer.probes.readiness: the proposer sidecar has no readiness probe (a crashing proposer must never take its decode pod out of service); set startup or liveness, or use proposer.mode deployment" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Environment every Baton container gets: its pod IP (the address it advertises). */}}
{{- define "baton.podEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/* Prometheus' scrape annotations for a pod. */}}
{{- define "baton.scrapeAnnotations" -}}
{{- if and .Values.metrics.enabled .Values.metrics.scrapeAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | int | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* Health probes (grpc.health.v1) of a container, at (dict "root" $ "port" P "probes" the
pool's probes values ["defaults" (dict "startup|readiness|liveness" timings)]): each probe in
defaults (default: all three, with the timings below) or in probes, the pool's timings over the
defaults key by key. */}}
{{- define "baton.grpcProbes" -}}
{{- $p := .probes | default dict -}}
{{- $handler := dict "root" .root "port" .port "noTimeout" true -}}
{{- /* Defaults that survive a pod busy on every core (a check may take seconds, and miss twice);
loading a large model takes minutes, so the startup probe allows 20. */ -}}
{{- $standard := dict
  "startup" (dict "periodSeconds" 5 "timeoutSeconds" 5 "failureThreshold" 240)
  "readiness" (dict "periodSeconds" 5 "timeoutSeconds" 5 "failureThreshold" 3)
  "liveness" (dict "periodSeconds" 10 "timeoutSeconds" 5 "failureThreshold" 6) -}}
{{- $defaults := .defaults | default $standard -}}
{{- range $name, $field := dict "startup" "startupProbe" "readiness" "readinessProbe" "liveness" "livenessProbe" }}
{{- if or (hasKey $defaults $name) (hasKey $p $name) }}
{{ $field }}:
  {{- include "baton.probeHandler" $handler | nindent 2 }}
  {{- toYaml (merge (deepCopy (index $p $name | default dict)) (deepCopy (index $defaults $name | default (index $standard $name)))) | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A pool's pod security context: its own podSecurityContext unless null, else the top-level
one. Takes (dict "root" $ "pool" the pool's values). */}}
{{- define "baton.podSecurityContext" -}}
{{- $own := .pool.podSecurityContext -}}
{{- with ternary $own .root.Values.podSecurityContext (not (kindIs "invalid" $own)) }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* A pool's container security context: its own securityContext unless null, else the top-level
one. Takes (dict "root" $ "pool" the pool's values). */}}
{{- define "baton.securityContext" -}}
{{- $own := .pool.securityContext -}}
{{- with ternary $own .root.Values.securityContext (not (kindIs "invalid" $own)) }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/*
A pool's pod-level settings production clusters need beyond the chart's own: runtime and priority
classes, a service account, topology spread. Takes the pool's values.
*/}}
{{- define "baton.podExtras" -}}
{{- with .runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .serviceAccountName }}
serviceAccountName: {{ . | quote }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A pool's Deployment strategy: the pool's own, else for a GPU pool a rolling update that never adds
a pod before one goes (maxSurge 0: a full node has no spare GPU for the surge pod, which would wait
forever and stall the rollout), else the Kubernetes default. Takes (dict "root" $ "component" c).
*/}}
{{- define "baton.strategy" -}}
{{- $n := index .root.Values .component -}}
{{- if $n.strategy -}}
{{ toYaml $n.strategy }}
{{- else if and (has .component (list "prefill" "decode")) (hasPrefix "cuda" (include "baton.device" .)) -}}
type: RollingUpdate
rollingUpdate:
  maxSurge: 0
  maxUnavailable: 1
{{- end -}}
{{- end -}}

{{/* The Secret holding ca.crt, tls.crt and tls.key (security.tls). */}}
{{- define "baton.tlsSecretName" -}}
{{- $t := .Values.security.tls -}}
{{- if eq $t.source "existingSecret" -}}
{{- required "security.tls.existingSecret is required when security.tls.source is existingSecret" $t.existingSecret -}}
{{- else -}}
{{- include "baton.suffixedName" (dict "root" . "suffix" "tls") -}}
{{- end -}}
{{- end -}}

{{/* The names the router's clients dial: its Services' names, and security.tls.routerDnsNames. */}}
{{- define "baton.routerDnsNames" -}}
{{- $router := include "baton.componentName" (dict "root" . "component" "router") -}}
{{- /* localhost: clients of `kubectl port-forward` (NOTES.txt) reach the router as localhost. */ -}}
{{- $names := list $router (printf "%s.%s" $router .Release.Namespace) (printf "%s.%s.svc" $router .Release.Namespace) (printf "%s.%s.svc.%s" $router .Release.Namespace .Values.clusterDomain) "localhost" -}}
{{- toJson (concat $names .Values.security.tls.routerDnsNames) -}}
{{- end -}}

{{/*
The transport-security flags every Baton binary takes: the pod's certificate of the cluster CA
(mutual TLS between the processes, TLS on the router's ports), or --insecure when
security.tls.enabled is false (each binary refuses to start with neither).
*/}}
{{- define "baton.securityArgs" -}}
{{- if .Values.security.tls.enabled -}}
- --tls-cert
- /etc/baton/tls/tls.crt
- --tls-key
- /etc/baton/tls/tls.key
- --tls-ca
- /etc/baton/tls/ca.crt
- --tls-reload-s
- {{ .Values.security.tls.reloadSeconds | int | quote }}
{{- else -}}
- --insecure
{{- end -}}
{{- end -}}

{{/* The TLS Secret's volume (when TLS is on). */}}
{{- define "baton.tlsVolume" -}}
{{- if .Values.security.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "baton.tlsSecretName" . }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* kvTransferConfig's storage (extract_hidden_states): the volume behind shared_storage_path in the
nodes' pods, hiddenStatesStorage.existingClaim or an emptyDir. */}}
{{- define "baton.hiddenStatesVolume" -}}
{{- if .Values.kvTransferConfig }}
{{- $s := .Values.hiddenStatesStorage }}
- name: hidden-states
  {{- if $s.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ $s.existingClaim }}
  {{- else }}
  emptyDir:
    sizeLimit: {{ $s.sizeLimit }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Its mount in a node container (writable: the node writes the files there). */}}
{{- define "baton.hiddenStatesMount" -}}
{{- with .Values.kvTransferConfig }}
- name: hidden-states
  mountPath: {{ .kv_connector_extra_config.shared_storage_path }}
{{- end }}
{{- end -}}

{{/* Its mount in a serving container. */}}
{{- define "baton.tlsMount" -}}
{{- if .Values.security.tls.enabled }}
- name: tls
  mountPath: /etc/baton/tls
  readOnly: true
{{- end }}
{{- end -}}

{{/*
How the kubelet asks a process whether it serves, at (dict "root" $ "port" P): the native gRPC
probe in plain text; with TLS an exec probe, `baton probe`, over the pod's own certificate (the
kubelet's gRPC probe speaks no TLS).
*/}}
{{- define "baton.probeHandler" -}}
{{- if .root.Values.security.tls.enabled -}}
exec:
  command: ["baton", "probe", "--address", "127.0.0.1:{{ .port }}", "--tls-cert", "/etc/baton/tls/tls.crt", "--tls-key", "/etc/baton/tls/tls.key", "--tls-ca", "/etc/baton/tls/ca.crt"]
{{- if not .noTimeout }}
timeoutSeconds: 5
{{- end }}
{{- else -}}
grpc:
  port: {{ .port }}
{{- end -}}
{{- end -}}

{{/* A NetworkPolicy ingress rule for /metrics on .ports, from security.networkPolicy.metricsPeers. */}}
{{- define "baton.metricsIngress" -}}
{{- if .root.Values.metrics.enabled }}
- ports:
    {{- range .ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
  {{- with .root.Values.security.networkPolicy.metricsPeers }}
  from:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
{{- end -}}

{{/* What a Prometheus Operator scrape endpoint needs to reach Baton's /metrics: HTTPS with the
cluster certificate (TLS on), and an API key (metrics.scrapeKeySecret). Empty otherwise. */}}
{{- define "baton.scrapeSecurity" -}}
{{- if .Values.security.tls.enabled }}
{{- $secret := include "baton.tlsSecretName" . }}
scheme: https
tlsConfig:
  serverName: {{ include "baton.componentName" (dict "root" . "component" "router") }}
  ca:
    secret: {name: {{ $secret }}, key: ca.crt}
  cert:
    secret: {name: {{ $secret }}, key: tls.crt}
  keySecret: {name: {{ $secret }}, key: tls.key}
{{- end }}
{{- with .Values.metrics.scrapeKeySecret }}
{{- if .name }}
authorization:
  type: Bearer
  credentials: {name: {{ .name }}, key: {{ .key }}}
{{- end }}
{{- end }}
{{- end -}}
