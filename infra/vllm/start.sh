#!/usr/bin/env bash
# Start the two vLLM servers the CURE flow uses on the GPU host (see README.md here).
#   infra/vllm/start.sh judge      # the LLM judge / translator: OpenAI-compatible /v1/chat/completions
#   infra/vllm/start.sh reranker   # the cross-encoder: /score
# VLLM_API_KEY, when set, is required from clients (they read the same variable).
set -euo pipefail
what=${1:?usage: start.sh judge|reranker}
key_args=()
if [ -n "${VLLM_API_KEY:-}" ]; then key_args=(--api-key "$VLLM_API_KEY"); fi
case "$what" in
  judge)
    # 72B in 4-bit AWQ (~41 GB) fits one H100/H200; prefix caching is on by default
    # and the judge puts the shared instructions and query before each passage.
    exec vllm serve "${JUDGE_MODEL:-Qwen/Qwen2.5-72B-Instruct-AWQ}" \
      --port "${JUDGE_PORT:-8000}" --max-model-len 8192 --generation-config vllm \
      --structured-outputs-config.backend auto "${key_args[@]}" ;;
  reranker)
    # GTE's architecture needs the override; scores are raw logits when clients send use_activation=false.
    exec vllm serve "${RERANKER_MODEL:-Alibaba-NLP/gte-multilingual-reranker-base}" \
      --port "${RERANKER_PORT:-8001}" --runner pooling --trust-remote-code --max-model-len 512 \
      --hf-overrides '{"architectures": ["GteNewForSequenceClassification"]}' "${key_args[@]}" ;;
  *) echo "usage: start.sh judge|reranker" >&2; exit 2 ;;
esac
