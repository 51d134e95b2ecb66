"""One job's token stream: prompt, prefill, decode, speculation, stops and output."""
