"""ComfyUI starts with the pack in custom_nodes/ and imports it without failure."""


def test_server_serves_object_info(comfy_server):
    info = comfy_server.object_info()
    # Core nodes prove this is a working ComfyUI, not some other server on the port.
    assert {"KSampler", "SaveImage", "EmptyLatentImage"} <= set(info)
    assert comfy_server.alive()


def test_pack_imported_without_failure(comfy_server):
    line = comfy_server.pack_import_line()
    assert line is not None, "ComfyUI never tried to import the pack\n" + comfy_server.log_tail()
    assert "IMPORT FAILED" not in line, line
    assert comfy_server.pack_import_errors() == []
    log = comfy_server.log_text()
    # ComfyUI parses the pack's pyproject.toml ([tool.comfy]) at import; it must parse.
    assert "Unable to parse pyproject.toml" not in log, comfy_server.log_tail()
