"""ComfyUI's frontend opens in headless Chromium with the pack installed."""


def test_frontend_loads_graph(frontend_page):
    page = frontend_page
    assert page.evaluate("() => typeof window.app.graph === 'object' && window.app.graph !== null")
    assert page.evaluate("() => window.app.graph._nodes.length") > 0  # the default graph
    types = page.evaluate("() => Object.keys(window.LiteGraph.registered_node_types)")
    assert len(types) > 0
    assert "KSampler" in types, types[:20]
