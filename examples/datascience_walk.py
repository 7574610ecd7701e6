#!/usr/bin/env python3
"""A data-science agent's walk through cyrnel over its HTTP API, as an agent
would script it (standard library only):

1. read the guide (GET /environment/docs): it must speak of sessions,
   cyrnel.display, /workspace and list pandas and matplotlib;
2. open a session and upload a CSV into its workspace;
3. load it into a DataFrame in one execution, use that DataFrame in the next
   (the session keeps it);
4. describe() as a final expression comes back as an HTML table display;
5. a matplotlib figure comes back as a PNG display and, saved, as a file;
6. download the file and a CSV the program wrote;
7. kill a running program: the session and its DataFrame stay.

Run it against a server whose Python has pandas and matplotlib (Debian's
python3-pandas and python3-matplotlib: serve --python /usr/bin/python3):

    CYRNEL_URL=http://127.0.0.1:9371 CYRNEL_API_KEY=... python3 examples/datascience_walk.py

It prints each step and exits 1 at the first that does not hold.
"""

import base64
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ.get("CYRNEL_URL", "http://127.0.0.1:9371").rstrip("/")
KEY = os.environ.get("CYRNEL_API_KEY", "")
PNG = b"\x89PNG\r\n\x1a\n"


def call(method, path, body=None, raw=None, content_type=None):
    """One request; returns (status, decoded JSON or bytes)."""
    data, headers = None, {"Authorization": f"Bearer {KEY}"} if KEY else {}
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    elif raw is not None:
        data, headers["Content-Type"] = raw, content_type or "application/octet-stream"
    req = urllib.request.Request(BASE + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            status, payload, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, payload, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    if "json" in ctype:
        return status, json.loads(payload) if payload else None
    return status, payload


def check(what, ok, detail=""):
    if not ok:
        print(f"FAIL {what}: {detail}")
        sys.exit(1)
    print(f"ok   {what}")


def run(session, code):
    """Run code in the session and wait for its end."""
    status, p = call("POST", "/processes", {"code": code, "session": session, "waitMs": 60000})
    check(f"run {code.splitlines()[0]!r}", status == 201 and p["state"] == "idle", f"{status} {p}")
    return p


def main():
    status, guide = call("GET", "/environment/docs")
    guide = guide.decode() if isinstance(guide, bytes) else str(guide)
    for words in ("session", "cyrnel.display", "/workspace", "| pandas |", "| matplotlib |"):
        check(f"the guide mentions {words}", status == 200 and words in guide, guide[:200])

    status, s = call("POST", "/sessions", {})
    check("open a session", status == 201 and s["state"] == "ready", f"{status} {s}")
    sid = s["id"]

    csv = b"city,sales\nParis,3\nLyon,4\nParis,5\nNice,7\n"
    status, _ = call("PUT", f"/sessions/{sid}/files/" + urllib.parse.quote("data/sales.csv", safe=""), raw=csv, content_type="text/csv")
    check("upload data/sales.csv", status == 204, status)

    p = run(sid, "import pandas as pd\ndf = pd.read_csv('data/sales.csv')\nprint(len(df))")
    check("a DataFrame from the CSV", p["exitState"] == "success" and p["stdout"] == "4\n", p)
    p = run(sid, "df['sales'].sum()")
    check("the session kept the DataFrame", p["exitState"] == "success", p)

    p = run(sid, "df.describe()")
    _, ds = call("GET", f"/processes/{p['pid']}/displays")
    html = ds["items"][0]["data"].get("text/html", "") if ds and ds["items"] else ""
    check("describe() is an HTML table", p["exitState"] == "success" and "<table" in html and "mean" in html, ds)

    p = run(sid, "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\ndf.groupby('city').sum().plot.bar(ax=ax)\n"
                 "fig.savefig('plot.png')\ncyrnel.display(fig)\nplt.close(fig)\ndf.groupby('city').sum().to_csv('totals.csv')")
    _, ds = call("GET", f"/processes/{p['pid']}/displays")
    pngs = [d for d in (ds or {}).get("items", []) if "image/png" in d["data"]]
    check("the figure is a PNG display", p["exitState"] == "success" and len(pngs) == 1
          and base64.b64decode(pngs[0]["data"]["image/png"]).startswith(PNG), p["stderr"] if p else ds)

    status, png = call("GET", f"/sessions/{sid}/files/plot.png")
    check("download plot.png", status == 200 and png.startswith(PNG), status)
    status, totals = call("GET", f"/sessions/{sid}/files/totals.csv")
    check("download totals.csv", status == 200 and totals == b"city,sales\nLyon,4\nNice,7\nParis,8\n", totals)

    status, p = call("POST", "/processes", {"code": "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.01)", "session": sid})
    check("start a loop", status == 201, p)
    pid = p["pid"]
    # Follow its events until it has printed, then kill it.
    req = urllib.request.Request(f"{BASE}/processes/{pid}/events", headers={"Authorization": f"Bearer {KEY}"} if KEY else {})
    with urllib.request.urlopen(req, timeout=60) as events:
        for line in events:
            if line.startswith(b"data:") and b"looping" in line:
                break
    status, _ = call("POST", f"/processes/{pid}/kill")
    check("kill the loop", status == 200, status)
    status, p = call("GET", f"/processes/{pid}/wait?timeoutMs=30000")
    check("the loop was killed", status == 200 and p["exitState"] == "canceled" and p["reason"] == "killed", p)
    p = run(sid, "print(df.shape)")
    check("the session and its DataFrame survived the kill", p["exitState"] == "success" and p["stdout"] == "(4, 2)\n", p)

    status, s = call("GET", f"/sessions/{sid}")
    check("the session is still ready", s["state"] == "ready", s)
    call("DELETE", f"/sessions/{sid}")
    print("the walk passed")


if __name__ == "__main__":
    main()
