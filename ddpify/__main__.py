from ddpify.cli import main

raise SystemExit(main())
