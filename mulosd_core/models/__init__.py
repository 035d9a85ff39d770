"""Model families: architectures, safe checkpoint loading and the protocol decoding code uses."""
