"""memaudit's own name of a row no one else named (``report.module_operand``): ``MODULE:NODE.ATTR``
needs both the node and the attribute; without either it is the save's position in its module call."""

from __future__ import annotations

from memaudit.report import module_operand


def test_node_and_attribute_name_the_row() -> None:
    assert module_operand("mlp.fc1", "AddmmBackward0", "_saved_mat1", None) == "mlp.fc1:AddmmBackward0.mat1"
    assert module_operand(None, "AddmmBackward0", "_saved_mat1", None) == "AddmmBackward0.mat1"
    assert module_operand("m", "F", "saved_tensors[0]", "_data") == "m:F.saved_tensors[0]._data"


def test_without_the_node_or_the_attribute_a_row_is_its_position_in_the_call() -> None:
    assert module_operand("mlp.fc1", "AddmmBackward0", None, None, 1) == "mlp.fc1:saved[1]"
    assert module_operand("mlp.fc1", None, "_saved_mat1", None, 2) == "mlp.fc1:saved[2]"
    assert module_operand("mlp.fc1", None, None, None) == "mlp.fc1"
    assert module_operand(None, None, None, None) is None
