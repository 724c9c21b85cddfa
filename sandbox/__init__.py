"""Sandboxes for computer-use agents: real desktops (Xvfb, chromium, apps) behind an HTTP control server.

`sandbox.server` runs inside a box; the rest (client, backends, pool, task specs) runs on the host. Nothing
here knows about RL. Keep this file free of imports: the image ships it next to `sandbox/server`.
"""
