"""The watch reads a StatefulSet's and a LeaderWorkerSet's status as outside input: any JSON
gives a result (rolled out or not, counts, notes), never a traceback; and the rules hold on the
shapes a controller writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.actuator.watch import lws_state, statefulset_state
from runbooks.model.phrases import Phrase

JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner,
                                                                                  max_size=4), max_leaves=12)
KEYS = st.sampled_from(["replicas", "readyReplicas", "updatedReplicas", "observedGeneration", "currentRevision",
                        "updateRevision", "conditions", "updateStrategy", "rollingUpdate", "partition", "type",
                        "status", "generation"])
SHAPED = st.recursive(st.none() | st.integers(-2, 4) | st.sampled_from(["a", "b", "True", "OnDelete", "Available",
                                                                        "UpdateInProgress"]),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
                      max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(obj=st.one_of(JSON, SHAPED), leader=st.one_of(JSON, SHAPED), generation=st.none() | st.integers(-1, 5))
def test_any_status_gives_a_result_never_a_traceback(obj, leader, generation):
    done, replicas, partition, notes = statefulset_state({"spec": obj, "status": leader}, generation)
    assert isinstance(done, bool) and isinstance(replicas, int) and 0 <= partition <= max(replicas, 0)
    assert all(isinstance(n, str) for n in notes)
    done, groups, updated, ready, notes = lws_state({"spec": obj, "status": leader}, {"status": obj}, generation)
    assert isinstance(done, bool) and all(isinstance(n, int) for n in (groups, updated, ready))
    assert statefulset_state(obj, generation)[0] in (True, False)
    assert lws_state(obj, leader, generation)[0] in (True, False)


def _sts(observed: int, updated: int, ready: int, current: str = "b", partition: int = 0) -> dict:
    return {"spec": {"replicas": 3, "updateStrategy": {"rollingUpdate": {"partition": partition}}},
            "status": {"observedGeneration": observed, "replicas": 3, "readyReplicas": ready,
                       "updatedReplicas": updated, "currentRevision": current, "updateRevision": "b"}}


def test_a_statefulset_is_rolled_out_only_at_its_generation_with_every_pod_updated_and_ready():
    assert statefulset_state(_sts(2, 3, 3), 2)[0]
    assert not statefulset_state(_sts(1, 3, 3), 2)[0]           # the controller has not seen the write
    assert not statefulset_state(_sts(2, 2, 3, current="a"), 2)[0]  # one pod left on the old revision
    assert not statefulset_state(_sts(2, 3, 2), 2)[0]           # one not ready
    assert not statefulset_state(_sts(2, 3, 3, current="a"), 2)[0]  # current revision not moved yet
    done, _r, partition, notes = statefulset_state(_sts(2, 2, 3, current="a", partition=1), 2)
    assert done and partition == 1 and notes == (Phrase("watch.partition", {"partition": 1}),)
    assert not statefulset_state(_sts(2, 2, 3), None)[0]        # no generation to wait for: never held
