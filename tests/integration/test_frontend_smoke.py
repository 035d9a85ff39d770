"""ComfyUI's frontend opens in headless Chromium with the pack installed, and knows our nodes."""

NEW_NODE_JS = """(type) => {
    const n = window.LiteGraph.createNode(type);
    return {title: n.title, category: n.category || n.constructor.category,
            widgets: Object.fromEntries((n.widgets || []).map(w => [w.name, w.value]))};
}"""


def test_a_node_added_in_the_frontend_starts_at_the_shipped_settings(frontend_page):
    """A Local Verifier or MuLo-SD Sampler a user adds from the node library is MuLo-SD as the library runs it
    (mulosd_core.presets), under the design card's name."""
    from mulosd_core import presets

    page = frontend_page
    assert page.evaluate("() => window.app.graph._nodes.length") > 0  # the default graph loaded
    v = presets.mulo_verifier()
    node = page.evaluate(NEW_NODE_JS, "MuLoSDLocalVerifier")
    assert node["title"] == "Local Verifier" and node["category"] == "MuLo-SD/components"
    w = node["widgets"]
    assert (w["rule"], w["tau"], w["k_neighbours"], w["expansion_radius"], w["rejection"], w["resampling"],
            w["recheck"], w["recheck_scope"]) == (v.rule, v.tau, v.k_neighbours, v.expansion_radius, v.rejection,
                                                  v.resampling, v.recheck, v.recheck_scope)
    node = page.evaluate(NEW_NODE_JS, "MuLoSDSampler")
    assert node["title"] == "MuLo-SD Sampler" and node["category"] == "MuLo-SD/sampling"
    # the schedule widgets start at -1: the pair's shipped setting, which presets.resolve supplies at run time
    assert (node["widgets"]["rows_per_step"], node["widgets"]["parallel_window"], node["widgets"]["draft_length"]) == (
        -1, -1, -1)
