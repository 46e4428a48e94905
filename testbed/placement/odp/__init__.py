"""ODP: optimal operator placement as an integer linear program (Cardellini et al., DEBS 2016).

Spec: odp.md. The entry point for a placement strategy is `solve(instance, settings) -> OdpResult`;
`build_model` is the solver-agnostic ILP, `solver_highs` / `solver_cbc` translate it.
"""
from testbed.placement.odp.instance import (
                                            Edge,
                                            InstanceError,
                                            Link,
                                            NetworkObjective,
                                            Node,
                                            OdpInstance,
                                            Operator,
                                            Weights,
                                            instance_from_dict,
                                            instance_to_dict,
                                            load_instance,
)
from testbed.placement.odp.model import LinearModel, ObjectiveForm, ResponseTimeForm, build_model
from testbed.placement.odp.result import ModelSize, OdpResult, SolverName, SolverSettings, Status, TracePoint
from testbed.placement.odp.solve import solve

__all__ = [
    "Edge", "InstanceError", "Link", "NetworkObjective", "Node", "OdpInstance", "Operator", "Weights",
    "instance_from_dict", "instance_to_dict", "load_instance", "LinearModel", "ObjectiveForm",
    "ResponseTimeForm", "build_model", "ModelSize", "OdpResult", "SolverName", "SolverSettings", "Status",
    "TracePoint", "solve",
]
