"""Several nodes serving one home over PostgreSQL (issue 36): nodes that heartbeat, bots owned
through leases with fencing epochs, a fair share of bots per node, messages between nodes.

Modules: nodes (registration, heartbeat, who is alive), leases (acquire, renew, release, the
Fence), balance (each node's share, a pure function), node (the loop that ties them together),
messages (rows plus LISTEN/NOTIFY), live_chat (the dashboard's reply as it is written, to the
node whose Chat page sent the message), demo_node (a runner for the failover benchmark).
"""
