"""A local stand-in for the GBox cloud API (the part gbox-sdk 0.1.0a41 uses for Linux boxes).

Each GBox box is one real local desktop (a LocalBackend box: Xvfb + our control server), so the real SDK
(`AsyncGboxClient(base_url="http://127.0.0.1:PORT/api/v1/")`) drives real input and real screenshots.
Routes under /api/v1 follow the SDK's request and response types (camelCase JSON); errors are
`{"statusCode", "message", "error"}`. Routes under /_fake inject faults and expose what happened, for tests.
Run it with `python -m sandbox.testing.gbox_server` (__main__.py).

app.py routes the requests; boxes.py keeps the boxes and their life cycle; actions.py, commands.py and
files.py serve GBox's action, command and file APIs; bodies.py and wire.py are the request and error formats.
"""
