import time
from helix_dbos.testing import capture_log_events

async def test_smoke(launch):
    rt = await launch()
    with capture_log_events() as events:
        t=time.time()
        h = await rt.start("ops", "pick_color confirm")
        p = await rt.wait_for_pending(h.session_id)
        print("pending", p, time.time()-t)
        a = await rt.submit_tool_result(h.session_id, p[0]["toolCallId"], result={"color": "red"})
        print(a)
        p = await rt.wait_for_pending(h.session_id)
        a = await rt.submit_tool_result(h.session_id, p[0]["toolCallId"], error="nope")
        v = await rt.wait(h.session_id)
        print(v, time.time()-t)
    for e in events: print(e)
