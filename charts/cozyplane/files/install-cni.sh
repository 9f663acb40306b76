#!/bin/sh
# Installs the CNI plugins and the network configuration on a node: the agent DaemonSet's
# init container runs it (templates/agent.yaml), and so does the netns lab for each of its
# nodes (lab/src/lib.rs), with the same arguments.
#
#   install-cni.sh <our plugin binary> <conflist> <host root> <plugin dir>
#
# A runtime finds a plugin by its `type` in CNI_PATH, so every `type` the conflist names is
# installed into <host root>/opt/cni/bin under that name, read from the conflist itself: a
# name can never differ from what the conflist asks for. The first "type" key of the file
# is ours (<our plugin binary>); every other one (portmap, when chained) is copied from
# <plugin dir>/<type> (the agent image's /usr/lib/cni), so no plugin is assumed on the node,
# and a missing one fails the install. Every file is replaced atomically (write beside, then
# rename), so a runtime never sees half a file. Runs under busybox sh.
set -eu
if [ $# -ne 4 ]; then
	echo "usage: install-cni.sh <our plugin binary> <conflist> <host root> <plugin dir>" >&2
	exit 2
fi
bin=$1
conf=$2
root=$3
plugins=$4
types=$(grep -o '"type"[[:space:]]*:[[:space:]]*"[^"]*"' "$conf" | sed 's/.*"\([^"]*\)"$/\1/')
ours=$(echo "$types" | head -n 1)
if [ -z "$ours" ]; then
	echo "install-cni: no plugin type in $conf" >&2
	exit 1
fi
# Every plugin is checked before anything is written: a failed install changes nothing.
for t in $types; do
	if [ "$t" != "$ours" ] && [ ! -f "$plugins/$t" ]; then
		echo "install-cni: $conf chains \"$t\", but there is no $plugins/$t to install" >&2
		exit 1
	fi
done
mkdir -p "$root/opt/cni/bin" "$root/etc/cni/net.d"
put() {
	cp "$1" "$root/opt/cni/bin/$2.new"
	chmod 0755 "$root/opt/cni/bin/$2.new"
	mv "$root/opt/cni/bin/$2.new" "$root/opt/cni/bin/$2"
	echo "install-cni: $root/opt/cni/bin/$2"
}
put "$bin" "$ours"
done=" $ours "
for t in $types; do
	case "$done" in
	*" $t "*) ;;
	*)
		put "$plugins/$t" "$t"
		done="$done$t "
		;;
	esac
done
name=$(basename "$conf")
cp "$conf" "$root/etc/cni/net.d/$name.new"
mv "$root/etc/cni/net.d/$name.new" "$root/etc/cni/net.d/$name"
echo "install-cni: $root/etc/cni/net.d/$name"
