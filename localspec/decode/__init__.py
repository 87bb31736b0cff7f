"""The decoding algorithm, pure over a narrow backend protocol: sequence state, the round, acceptance
rules, sampling, noise, the lookup drafter, the text stream, stats."""
