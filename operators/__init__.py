"""The nine OEE operator implementations and their shared runner (live testbed).

The operator *types* (SLOs, resources, edges, service models) are configuration in
`experiments/conf/topology/`; this package will hold the code that runs inside the containers.
"""
