import sys, os, time
sys.path.insert(0, "/work/rv-readme/tests/e2e")
os.environ["IDEM_BIN"]="/work/rv-readme/build/idem"
from harness import Gateway
from upstream import Upstream
up = Upstream().start()
for store in ["redis://:wrong@127.0.0.1:26391", "redis://:sekret@127.0.0.1:26391/99", "redis://127.0.0.1:26391"]:
    gw = Gateway(up.url, store=store, args=["--workers","2"], admin=True).start()
    try:
        t0=time.time(); n=0
        while time.time()-t0 < 3.2:
            r = gw.request("POST","/a", body=b"x", key="k%d"%n); n+=1
        print(store, "last status", r.status, r.header("Retry-After"), r.body[:100], "n=",n)
        print("readyz", gw.admin_request("GET","/readyz").status)
    finally:
        gw.stop()
        print(gw.stderr())
up.stop()
