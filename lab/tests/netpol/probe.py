# Probe for lab/tests/netpol.rs, run inside a pod's (or a node's) netns.
#   serve TCPPORTS UDPPORTS   listen on every port of the comma-separated lists: a TCP
#                             connection gets "ok\n" and is closed, a UDP datagram is
#                             answered "ok"; prints "ready" once every socket is bound
#   probe TIMEOUT             reads "ID IP PROTO PORT" lines from stdin until EOF, runs
#                             them all at once, prints "ID 1" (connected and answered) or
#                             "ID 0" (nothing within TIMEOUT seconds) for each
import socket, sys, threading


def serve(tcp_ports, udp_ports):
    socks = []
    for p in tcp_ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", p))
        s.listen(256)
        socks.append(("tcp", s))
    for p in udp_ports:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("0.0.0.0", p))
        socks.append(("udp", u))

    def tcp(s):
        while True:
            c, _ = s.accept()
            try:
                c.sendall(b"ok\n")
            except OSError:
                pass
            c.close()

    def udp(u):
        while True:
            _, a = u.recvfrom(2048)
            u.sendto(b"ok", a)

    for kind, s in socks:
        threading.Thread(target=tcp if kind == "tcp" else udp, args=(s,), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


def one(ip, proto, port, timeout):
    try:
        if proto == "TCP":
            with socket.create_connection((ip, port), timeout=timeout) as c:
                c.settimeout(timeout)
                return c.recv(16).startswith(b"ok")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            # Three tries on one socket (one flow): a datagram lost on a first contact
            # is not a refusal.
            u.settimeout(timeout / 3)
            for _ in range(3):
                u.sendto(b"probe", (ip, port))
                try:
                    data, _ = u.recvfrom(64)
                    return data.startswith(b"ok")
                except socket.timeout:
                    continue
            return False
    except OSError:
        return False


def probe(timeout):
    jobs = [l.split() for l in sys.stdin if l.strip()]
    out = {}

    def run(job):
        ident, ip, proto, port = job
        out[ident] = one(ip, proto, int(port), timeout)

    threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for ident, ok in out.items():
        print(ident, 1 if ok else 0)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        ports = lambda s: [int(p) for p in s.split(",") if p]
        serve(ports(sys.argv[2]), ports(sys.argv[3]))
    elif sys.argv[1] == "probe":
        probe(float(sys.argv[2]))
