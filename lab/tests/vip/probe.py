# Probe for lab/tests/vip.rs and lab/benches/{vip,xlat}.rs, run inside pod netns.
#   serve NAME          TCP 8080 (IPv4 and IPv6): send NAME, then echo lines; UDP 5353: answer NAME
#   tcp IP PORT N       N new connections; prints the first line of each (or ERR)
#   udp IP PORT         one datagram; prints "<answer> <source address>" (or ERR)
#   hold IP PORT FILE   one connection: prints its first line, waits for FILE, sends a
#                       line and prints the echo (or ERR)
import os, socket, sys, threading, time

def serve(name):
    def conn(c):
        with c:
            c.sendall((name + "\n").encode())
            f = c.makefile("rb")
            for line in f:
                c.sendall(line)
    def tcp(fam):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", 8080))
        s.listen(128)
        while True:
            c, _ = s.accept()
            threading.Thread(target=conn, args=(c,), daemon=True).start()
    def udp():
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("0.0.0.0", 5353))
        while True:
            _, a = u.recvfrom(2048)
            u.sendto(name.encode(), a)
    threading.Thread(target=tcp, args=(socket.AF_INET,), daemon=True).start()
    # And IPv6 (a v6-only pod behind NAT46, lab/benches/xlat.rs); IPV6_V6ONLY keeps the two apart.
    threading.Thread(target=tcp, args=(socket.AF_INET6,), daemon=True).start()
    threading.Thread(target=udp, daemon=True).start()
    print("ready", flush=True)
    while True:
        time.sleep(3600)

def first_line(ip, port):
    c = socket.create_connection((ip, port), timeout=2)
    c.settimeout(2)
    return c, c.makefile("rb").readline().decode().strip()

def main():
    mode = sys.argv[1]
    if mode == "serve":
        serve(sys.argv[2])
    elif mode == "tcp":
        for _ in range(int(sys.argv[4])):
            try:
                c, l = first_line(sys.argv[2], int(sys.argv[3]))
                c.close()
                print(l or "ERR", flush=True)
            except OSError:
                print("ERR", flush=True)
    elif mode == "udp":
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.settimeout(2)
        try:
            u.sendto(b"q", (sys.argv[2], int(sys.argv[3])))
            d, a = u.recvfrom(2048)
            print(d.decode(), a[0], flush=True)
        except OSError:
            print("ERR", flush=True)
    elif mode == "hold":
        try:
            c, l = first_line(sys.argv[2], int(sys.argv[3]))
            print(l, flush=True)
            while not os.path.exists(sys.argv[4]):
                time.sleep(0.05)
            c.sendall(b"still-here\n")
            f = c.makefile("rb")
            print(f.readline().decode().strip() or "ERR", flush=True)
        except OSError:
            print("ERR", flush=True)

main()
