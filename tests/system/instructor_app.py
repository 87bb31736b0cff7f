"""A small instructor program, written as instructor's docs point it at an OpenAI-compatible local
server. tests/system/test_apps.py runs it in .venv-apps (`make app-venvs`: instructor's pins clash
with the dev venv's openai): argv is the base URL, the model, instructor's mode and the sentence;
it prints the extracted Person as JSON."""

from __future__ import annotations

import sys

import instructor
from openai import OpenAI
from pydantic import BaseModel, Field


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=150)
    city: str = Field(max_length=30)


def main(base_url: str, model: str, mode: str, sentence: str) -> None:
    client = instructor.from_openai(
        OpenAI(base_url=base_url, api_key="none", max_retries=0), mode=instructor.Mode[mode]
    )
    person = client.chat.completions.create(
        model=model, response_model=Person, max_retries=0, temperature=0, max_tokens=80,
        messages=[{"role": "user", "content": f"Extract the person: {sentence}"}],
    )  # fmt: skip
    print(person.model_dump_json())


if __name__ == "__main__":
    main(*sys.argv[1:])
