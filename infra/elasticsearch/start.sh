#!/usr/bin/env bash
# Start the single-node Elasticsearch of compose.yaml (docker compose up -d), wait until the
# cluster is at least yellow, and print the line to export for irforge (ES_URL).
# Without docker it prints how to run the tarball distribution, and still waits for a server
# that is already answering on ES_PORT.
#
# Environment: ES_PORT (9200), ES_START_TIMEOUT (180 s), ES_VERSION (8.19.3), ES_SECURITY,
# ELASTIC_PASSWORD, ES_HEAP, ES_MEM_LIMIT, ES_LICENSE — see compose.yaml.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
port=${ES_PORT:-9200}
timeout=${ES_START_TIMEOUT:-180}
version=${ES_VERSION:-8.19.3}
url="http://localhost:${port}"

auth=()
if [[ "${ES_SECURITY:-false}" == "true" ]]; then
  : "${ELASTIC_PASSWORD:?set ELASTIC_PASSWORD (the password of the elastic user) when ES_SECURITY=true}"
  auth=(-u "elastic:${ELASTIC_PASSWORD}")
fi

healthy() {
  curl -fsS ${auth[@]+"${auth[@]}"} "${url}/_cluster/health?wait_for_status=yellow&timeout=5s" >/dev/null 2>&1
}

if command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then
  docker compose -f "${here}/compose.yaml" up -d
  logs_hint="docker compose -f ${here}/compose.yaml logs elasticsearch"
else
  arch=$(uname -m)
  [[ "${arch}" == "arm64" ]] && arch=aarch64
  cat >&2 <<EOT
docker compose is not available here. Run the tarball distribution instead (needs no root):

  curl -fLO https://artifacts.elastic.co/downloads/elasticsearch/elasticsearch-${version}-linux-${arch}.tar.gz
  tar xzf elasticsearch-${version}-linux-${arch}.tar.gz
  cd elasticsearch-${version}
  ES_JAVA_OPTS="-Xms2g -Xmx2g" ./bin/elasticsearch -d -p es.pid \\
      -Ediscovery.type=single-node -Expack.security.enabled=false -Ehttp.port=${port}

(stop it with: pkill -F es.pid). Then run this script again to wait for it.
EOT
  if ! healthy; then
    echo "no Elasticsearch answers at ${url} yet" >&2
    exit 1
  fi
  logs_hint="the server's logs/ folder"
fi

echo "waiting up to ${timeout}s for Elasticsearch at ${url} (cluster health yellow or green)..." >&2
deadline=$((SECONDS + timeout))
until healthy; do
  if ((SECONDS >= deadline)); then
    echo "Elasticsearch at ${url} is not healthy after ${timeout}s; see ${logs_hint}" >&2
    exit 1
  fi
  sleep 2
done

status=$(curl -fsS ${auth[@]+"${auth[@]}"} "${url}/_cluster/health?filter_path=status" || true)
version_seen=$(curl -fsS ${auth[@]+"${auth[@]}"} "${url}/?filter_path=version.number" || true)
echo "Elasticsearch is up: ${version_seen} ${status}" >&2
echo "export ES_URL=${url}"
if [[ "${ES_SECURITY:-false}" == "true" ]]; then
  # The password is not printed: reuse the variable it came from.
  echo "export ES_USERNAME=elastic"
  echo 'export ES_PASSWORD="${ELASTIC_PASSWORD}"'
fi
