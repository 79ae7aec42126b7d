"""From contexts to answers: the LLM answering rounds, canonical values, the vote."""
