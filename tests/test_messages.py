"""The one message rule: what each op receives and sends, and the Deps the dataflow walk reports."""

from pipeline_kit.schedules import Dep, Message, Op, Schedule, dataflow, message_plan, one_f_one_b, op_messages

V_PP2 = Schedule.from_text("# schedule=v pp=2 microbatches=1 chunks=2 placement=v\n"
                           "r0: F0c0 F0c1 B0c1 B0c0\nr1: F0c0 F0c1 B0c1 B0c0\n")


def test_each_op_receives_from_its_neighbour_stage_and_sends_on():
    assert op_messages(one_f_one_b(3, 1), 1) == [
        (Message("forward", 0, 0, 1), Message("forward", 0, 1, 2)),
        (Message("backward", 0, 2, 1), Message("backward", 0, 1, 0)),
    ]
    # the first stage takes tokens and sends no input gradient; the last computes the loss and sends no output
    first, last = op_messages(one_f_one_b(3, 1), 0), op_messages(one_f_one_b(3, 1), 2)
    assert first == [(None, Message("forward", 0, 0, 1)), (Message("backward", 0, 1, 0), None)]
    assert last == [(Message("forward", 0, 1, 2), None), (None, Message("backward", 0, 2, 1))]

def test_v_placement_keeps_the_turn_on_one_rank():
    # rank 1 holds stages 1 and 2: the activation 1 -> 2 and the gradient 2 -> 1 never leave it
    plan = message_plan(V_PP2)
    assert plan[(1, 1)] == [Message("forward", 0, 1, 2), Message("backward", 0, 2, 1)]
    assert plan[(0, 1)] == [Message("forward", 0, 0, 1), Message("backward", 0, 3, 2)]
    assert plan[(1, 0)] == [Message("forward", 0, 2, 3), Message("backward", 0, 1, 0)]
    assert Message("forward", 0, 2, 3).boundary == 2
    assert Message("backward", 0, 3, 2).what(2, "v") == "backward gradient of microbatch 0, chunk 1 (stage 2)"


def test_dataflow_names_the_op_that_made_each_dependency():
    walk = {(r, op.text(True)): deps for r, op, _, deps in dataflow(V_PP2)}
    # B0 on stage 2 (rank 1, chunk 1) needs its own forward and the gradient from stage 3 (rank 0, op 3)
    assert walk[(1, "B0c1")] == (Dep("F", 0, 2, 1, Op("F", 0, 1), 1), Dep("G", 0, 3, 0, Op("B", 0, 1), 2))
    assert walk[(0, "F0c0")] == ()
