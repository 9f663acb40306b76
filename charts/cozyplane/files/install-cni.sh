#!/bin/sh
# Installs the CNI plugin and the network configuration on a node: the agent DaemonSet's
# init container runs it (templates/agent.yaml), and so does the netns lab for each of its
# nodes (lab/src/lib.rs).
#
#   install-cni.sh <plugin binary> <conflist> <host root>
#
# A runtime finds a plugin by its `type` in CNI_PATH, so the plugin is installed under the
# `type` of the conflist's first plugin (ours), read from the conflist itself: the name can
# never differ from what the conflist asks for. That `type` is the first "type" key of the
# file. Both files are replaced atomically (write beside, then rename), so a runtime never
# sees half a file.
set -eu
bin=$1
conf=$2
root=$3
type=$(grep -o '"type"[[:space:]]*:[[:space:]]*"[^"]*"' "$conf" | head -n 1 | sed 's/.*"\([^"]*\)"$/\1/')
if [ -z "$type" ]; then
	echo "install-cni: no plugin type in $conf" >&2
	exit 1
fi
mkdir -p "$root/opt/cni/bin" "$root/etc/cni/net.d"
cp "$bin" "$root/opt/cni/bin/$type.new"
chmod 0755 "$root/opt/cni/bin/$type.new"
mv "$root/opt/cni/bin/$type.new" "$root/opt/cni/bin/$type"
name=$(basename "$conf")
cp "$conf" "$root/etc/cni/net.d/$name.new"
mv "$root/etc/cni/net.d/$name.new" "$root/etc/cni/net.d/$name"
echo "install-cni: $root/opt/cni/bin/$type, $root/etc/cni/net.d/$name"
