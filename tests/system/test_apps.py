"""Libraries people build on, end to end against `localspec serve` on the real default pair
(Qwen2.5-Coder 0.5B -> 1.5B, speculation on, auto K), as their own docs say to point them at an
OpenAI-compatible server: pydantic-ai (an agent framework; a structured output_type is a tool it
forces, so this runs tool calling through the constraint), outlines (it sends response_format
json_schema), instructor (its default mode, TOOLS: a forced tool call; it runs in a venv of its own,
.venv-apps, since its pins clash with pydantic-ai's openai) and the OpenAI Agents SDK (on the
Responses API: a forced tool it runs, a typed output). Each must finish its task on the first try,
with the right facts: greedy, one request each, no retries."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel, Field

from ..helpers import ROOT, Server

INSTRUCTOR_PY = ROOT / ".venv-apps" / "bin" / "python"  # make app-venvs
INSTRUCTOR_APP = Path(__file__).with_name("instructor_app.py")

pytest.importorskip("pydantic_ai")
pytest.importorskip("outlines")
pytest.importorskip("agents")


class CityWeather(BaseModel):
    city: str
    temperature_c: int = Field(ge=-60, le=60)


class Person(BaseModel):
    # bounded, as an app's schema would be: outlines hands back a cut text with no finish_reason
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=150)


class CountryFloat(BaseModel):
    country: str
    population_millions: float  # unbounded, as apps write it: the grammar bounds its digits


class CountryInt(BaseModel):
    country: str
    population_millions: int


@pytest.fixture(scope="module")
def server(real_pair):
    srv = Server(real_pair, "--parallel", "1", "--max-tokens", "80", "--n-ctx", "2048", start_timeout=900)
    yield srv
    srv.stop()


def test_pydantic_ai_agent_gets_a_validated_result_through_a_tool_call(server):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(
        server.health()["model"], provider=OpenAIProvider(base_url=server.url + "/v1", api_key="none")
    )
    agent = Agent(
        model, output_type=CityWeather, retries=0, model_settings={"temperature": 0, "max_tokens": 80}
    )
    result = agent.run_sync("It is 18 degrees in Paris today. Report the city and its temperature.")
    assert isinstance(result.output, CityWeather)
    assert result.output.city == "Paris" and result.output.temperature_c == 18
    calls = [p for m in result.all_messages() for p in getattr(m, "parts", []) if p.part_kind == "tool-call"]
    assert calls and calls[0].tool_name == "final_result"  # the output came as a tool call


@pytest.mark.parametrize("output_type", [CountryFloat, CountryInt])
def test_pydantic_ai_typed_result_with_an_unbounded_number_passes_first_time(server, output_type):
    """A number the schema leaves unbounded is bounded as llama.cpp's grammars bound it (16 integral
    digits): the stand-in once wrote 1000000000000... until max_tokens, and pydantic-ai failed with
    "token limit exceeded while generating a tool call" (issue #45)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(
        server.health()["model"], provider=OpenAIProvider(base_url=server.url + "/v1", api_key="none")
    )
    agent = Agent(
        model, output_type=output_type, retries=0, model_settings={"temperature": 0, "max_tokens": 80}
    )
    result = agent.run_sync(
        "France has about 68 million people. Report the country and its population in millions."
    )
    assert isinstance(result.output, output_type)
    assert result.output.country == "France" and 60 <= result.output.population_millions <= 70


def test_outlines_structured_generation(server):
    import outlines

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    model = outlines.from_openai(client, server.health()["model"])
    text = model("Ann is 31 years old. Extract the person as JSON.", Person, max_tokens=60, temperature=0)
    person = Person.model_validate_json(text)
    assert person.name == "Ann" and person.age == 31


def test_instructor_extracts_a_person_through_a_tool_call(server):
    if not INSTRUCTOR_PY.exists():
        if os.environ.get("CI"):
            pytest.fail("instructor's venv .venv-apps is missing: `make app-venvs` builds it")
        pytest.skip("instructor's venv .venv-apps is missing (make app-venvs)")
    sentence = "Maria Lopez is a 42-year-old engineer who lives in Madrid."
    run = subprocess.run(
        [str(INSTRUCTOR_PY), str(INSTRUCTOR_APP), server.url + "/v1", server.health()["model"], "TOOLS", sentence],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == {"name": "Maria Lopez", "age": 42, "city": "Madrid"}


def _agent_model(server):  # noqa: ANN001, ANN202
    from agents import OpenAIResponsesModel, set_tracing_disabled

    set_tracing_disabled(True)  # its traces go to OpenAI's servers
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    return OpenAIResponsesModel(model=server.health()["model"], openai_client=client)


def test_agents_sdk_runs_a_forced_tool_with_the_right_argument(server):
    from agents import Agent, ModelSettings, Runner, function_tool

    seen: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"Sunny, 21 C in {city}."

    # the tool's result is the answer: on a second turn the 1.5B calls the tool again
    agent = Agent(
        name="weather", instructions="Answer with the weather tool's result.", tools=[get_weather],
        model=_agent_model(server), tool_use_behavior="stop_on_first_tool",
        model_settings=ModelSettings(tool_choice="get_weather", temperature=0, max_tokens=60),
    )  # fmt: skip
    result = Runner.run_sync(agent, "What is the weather in Paris?", max_turns=2)
    assert seen == ["Paris"] and result.final_output == "Sunny, 21 C in Paris."


def test_agents_sdk_typed_output_has_the_facts(server):
    from agents import Agent, ModelSettings, Runner

    agent = Agent(
        name="extract", instructions="Extract the person.", output_type=Person,
        model=_agent_model(server), model_settings=ModelSettings(temperature=0, max_tokens=60),
    )  # fmt: skip
    result = Runner.run_sync(agent, "Ann is 31 years old.", max_turns=1)
    assert result.final_output == Person(name="Ann", age=31)
